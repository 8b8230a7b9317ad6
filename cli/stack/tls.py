"""A certificate authority of the local stack and the certificates it signs, generated at first start.

Every file is created with mode 0600 in a 0700 directory (app.stack.secret_file): the keys are secrets, and the
certificates need no wider audience than the stack's user. Clients trust the CA's certificate (`ca.pem`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from streamfill.cli.stack.secret_file import private_dir, write_private

VALID_DAYS = 3650


def stack_hosts(settings) -> list[str]:
    """The names a certificate of the local stack is for: STREAMFILL_HOST, 127.0.0.1 and localhost."""
    return list(dict.fromkeys([settings.host, "127.0.0.1", "localhost"]))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "streamfill local stack"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ensure_ca(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) of the stack's CA in directory, made once."""
    cert_file, key_file = directory / "ca.pem", directory / "ca-key.pem"
    if cert_file.exists() and key_file.exists():
        return cert_file, key_file
    private_dir(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    name = _name("streamfill local CA")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    for path in (cert_file, key_file):
        path.unlink(missing_ok=True)
    write_private(key_file, _key_pem(key))
    write_private(cert_file, _cert_pem(cert))
    return cert_file, key_file


def split_pem(pem: Path) -> tuple[str, str]:
    """(private key, certificate chain) of a file ensure_server_pem made."""
    text = pem.read_text()
    at = text.index("-----BEGIN CERTIFICATE-----")
    return text[:at], text[at:]


def ensure_server_pem(directory: Path, name: str, hosts: list[str]) -> Path:
    """`<name>.pem` in directory: a private key and its certificate for `hosts` (IP addresses or DNS names),
    signed by the CA (made first if missing). Made once; a file whose certificate lacks one of `hosts` is
    made again."""
    out = directory / f"{name}.pem"
    if out.exists() and set(hosts) <= _hosts_of(out):
        return out
    ca_file, ca_key_file = ensure_ca(directory)
    ca = x509.load_pem_x509_certificate(ca_file.read_bytes())
    ca_key = serialization.load_pem_private_key(ca_key_file.read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    alt = [x509.IPAddress(ipaddress.ip_address(h)) if _is_ip(h) else x509.DNSName(h) for h in hosts]
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    out.unlink(missing_ok=True)
    write_private(out, _key_pem(key) + _cert_pem(cert) + _cert_pem(ca))
    return out


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _hosts_of(pem: Path) -> set[str]:
    try:
        cert = x509.load_pem_x509_certificate(pem.read_bytes())
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound, OSError):
        return set()
    return {str(ip) for ip in alt.get_values_for_type(x509.IPAddress)} | set(alt.get_values_for_type(x509.DNSName))
