"""A CLI scripts can read: every error ends a command (and a job under spark-submit) with the exit code of what it
was (docs/operations.md#exit-codes), and a command given no address of a service says which of the local stack's
it took, or refuses where there is no local stack. Through the real `streamfill` command (Typer's CliRunner):
none of these needs the stack."""

from __future__ import annotations

import ast
import importlib
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streamfill import REPO_ROOT

pytestmark = pytest.mark.unit

BAD_INPUT, REFUSED, HELD, UNREACHABLE, FAILED = 2, 78, 73, 75, 1

# every error class streamfill raises on purpose, by the exit code its kind gives (a new one must be added here)
EXPECTED = {
    "OptionError": BAD_INPUT, "JobsFileError": BAD_INPUT, "UnknownJob": BAD_INPUT, "BrokenEntries": BAD_INPUT,
    "NotCarried": BAD_INPUT,
    "BrokerRefused": REFUSED, "DataLossError": REFUSED, "SinkError": REFUSED, "CheckpointMismatch": REFUSED,
    "ForeignCheckpoint": REFUSED, "Fenced": REFUSED, "JobKindMismatch": REFUSED, "MissingGrant": REFUSED,
    "RevisionMismatch": REFUSED, "UnsupportedVersion": REFUSED, "ReplayRefused": REFUSED, "MissingExtra": REFUSED,
    "PoolingRefused": REFUSED,
    "JobBusy": HELD,
    "BrokerError": UNREACHABLE, "RegistryError": UNREACHABLE, "StackError": UNREACHABLE,
    "OffsetsDbUnreachable": UNREACHABLE, "AirflowUnreachable": UNREACHABLE, "ServiceUnreachable": UNREACHABLE,
    "QualityFailed": FAILED,
    # neither a refusal nor an outage: a step of the protocol refused mid-batch, a DAG run that failed
    "StreamfillError": FAILED, "ProtocolError": FAILED, "AirflowError": FAILED,
    # the streamfill page's own: an HTTP answer, never a command's exit
    "NotFound": FAILED, "NoSuchRun": FAILED, "UnknownUsers": FAILED, "NoDatabase": FAILED,
}
PACKAGES = ("streamfill", "connectors", "offsets_db", "spark_jobs", "orchestration", "cli")


def error_classes() -> dict[str, type]:
    """Every subclass of StreamfillError the project's code defines, found in its source (so none is missed for
    not being imported), by name."""
    from streamfill.errors import StreamfillError

    found: dict[str, str] = {"StreamfillError": "streamfill.errors"}
    trees = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            rel = path.relative_to(REPO_ROOT)
            parts = list(rel.with_suffix("").parts)
            module = ".".join(parts if parts[0] == "streamfill" else ["streamfill", *parts])
            trees[module.removesuffix(".__init__")] = ast.parse(path.read_text())
    grew = True
    while grew:
        grew = False
        for module, tree in trees.items():
            for node in ast.walk(tree):
                bases = {getattr(b, "id", getattr(b, "attr", None)) for b in getattr(node, "bases", ())}
                if isinstance(node, ast.ClassDef) and node.name not in found and bases & found.keys():
                    found[node.name] = module
                    grew = True
    classes = {name: getattr(importlib.import_module(module), name) for name, module in found.items()}
    assert all(issubclass(c, StreamfillError) for c in classes.values())
    return classes


def test_every_error_streamfill_raises_has_the_exit_code_of_its_kind():
    from streamfill.console import exit_code

    classes = error_classes()
    assert {name: exit_code(c.kind) for name, c in classes.items()} == EXPECTED


def test_the_libraries_errors_for_a_service_out_of_reach_are_outages_and_anything_else_unexpected(capsys):
    import urllib.error

    import psycopg2
    from confluent_kafka import KafkaError, KafkaException
    from sqlalchemy.exc import OperationalError

    from streamfill.spark_jobs.exits import ended

    refused = psycopg2.OperationalError('connection to server at "127.0.0.1", port 1 failed: Connection refused')
    outages = [OperationalError("SELECT 1", {}, refused), refused,
               KafkaException(KafkaError(KafkaError._TRANSPORT, "127.0.0.1:1/bootstrap: Connection refused")),
               KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")),
               urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")), ConnectionRefusedError()]
    for outage in outages:
        assert ended(outage).code == UNREACHABLE, outage
    out = capsys.readouterr().err
    assert "cannot reach PostgreSQL: connection to server at" in out and "cannot reach Kafka: " in out
    assert "Traceback" not in out

    # anything else is unexpected: its traceback, then its message
    for other in (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
                  urllib.error.HTTPError("http://a", 500, "boom", {}, None), KeyError("x")):
        try:
            raise other
        except Exception as exc:
            assert ended(exc).code == FAILED
        out = capsys.readouterr().err
        assert "Traceback" in out and out.strip().splitlines()[-1].startswith(
            f"error: unexpected {type(other).__name__}: "), out


def run(args: list[str], monkeypatch, **env: str | None):
    """`streamfill ARGS` with `env` set (None: unset); stdout and stderr apart."""
    from streamfill.cli.main import app

    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("COLUMNS", "250")
    return CliRunner().invoke(app, args)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_bad_flag_a_bad_setting_and_a_broken_jobs_file_exit_2(monkeypatch, tmp_path):
    flag = run(["offsets", "latest", "--job", "j", "--no-such-flag"], monkeypatch)
    assert flag.exit_code == BAD_INPUT, flag.output
    since = run(["offsets", "latest", "--job", "j", "--since", "whenever"], monkeypatch)
    assert since.exit_code == BAD_INPUT, since.output
    broken = tmp_path / "jobs.yaml"
    broken.write_text("jobs:\n  a:\n    topic: a\n    table: a\n    columns: {id: {type: nope}}\n")
    checked = run(["jobs", "check", str(broken)], monkeypatch)
    assert checked.exit_code == BAD_INPUT and "job 'a'" in checked.stderr, checked.output
    setting = run(["jobs", "list"], monkeypatch, STREAMFILL_PG_PORT="five")
    assert setting.exit_code == BAD_INPUT and "STREAMFILL_PG_PORT" in setting.stderr, setting.output


def test_an_unreachable_offsets_db_exits_75_naming_it_without_a_traceback_or_its_password(monkeypatch):
    port = closed_port()
    done = run(["offsets", "latest", "--job", "j"], monkeypatch,
               STREAMFILL_DB_URL=f"postgresql+psycopg2://jobs:s3cret-pw@127.0.0.1:{port}/warehouse")
    assert done.exit_code == UNREACHABLE, done.output
    said = " ".join(done.stderr.split())
    assert f"cannot reach offsets_db at postgresql+psycopg2://jobs:***@127.0.0.1:{port}/warehouse" in said, said
    assert "Traceback" not in done.output and "s3cret-pw" not in done.output


def test_a_failed_check_exits_1(monkeypatch, tmp_path):
    ports = {f"STREAMFILL_{name}_PORT": str(closed_port())
             for name in ("PG", "KAFKA", "KAFKA_CONTROLLER", "KAFKA_SASL", "KAFKA_OAUTH", "AIRFLOW",
                          "SCHEMA_REGISTRY", "SPARK_CONNECT")}
    done = run(["stack", "status"], monkeypatch, STREAMFILL_HOME=str(tmp_path / "stack"), **ports)
    assert done.exit_code == FAILED and "down" in done.stdout, done.output


def test_an_unexpected_error_exits_1_with_its_traceback_and_its_message_last(monkeypatch):
    from streamfill.spark_jobs import pipelines

    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug of the jobs file reader")

    monkeypatch.setattr(pipelines, "load_each", broken)
    done = run(["jobs", "list"], monkeypatch)
    assert done.exit_code == FAILED, done.output
    assert "Traceback (most recent call last)" in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "error: unexpected RuntimeError: a bug of the jobs file reader"


def stack_home(tmp_path: Path, password: str | None) -> Path:
    """A STREAMFILL_HOME; with `password`, one where the local stack ran (its first start writes the password)."""
    home = tmp_path / "stack"
    (home / "secrets").mkdir(parents=True)
    if password is not None:
        (home / "secrets" / "pg_password").write_text(password)
    return home


def test_with_no_address_set_a_command_refuses_outside_the_local_stack_naming_the_variable(monkeypatch, tmp_path):
    home = stack_home(tmp_path, None)
    done = run(["offsets", "latest", "--job", "j"], monkeypatch, STREAMFILL_HOME=str(home), STREAMFILL_DB_URL=None)
    assert done.exit_code == BAD_INPUT, done.output
    said = " ".join(done.stderr.split())
    assert "STREAMFILL_DB_URL" in said and str(home) in said and "streamfill stack up" in said, said
    from streamfill.settings import Settings

    assert "@127.0.0.1:" in Settings(home=home, db_url=None).offsets_db_url  # the command ended: a library again


def test_with_no_address_set_a_command_says_which_of_the_local_stacks_it_took(monkeypatch, tmp_path):
    home, port = stack_home(tmp_path, "s3cret-pw"), closed_port()
    done = run(["offsets", "latest", "--job", "j"], monkeypatch, STREAMFILL_HOME=str(home), STREAMFILL_DB_URL=None,
               STREAMFILL_PG_PORT=str(port))
    assert done.exit_code == UNREACHABLE, done.output
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"offsets_db: the local stack's postgresql+psycopg2://streamfill:***@127.0.0.1:{port}/"
                            "streamfill") and first.endswith("(STREAMFILL_DB_URL is not set)"), done.stderr
    assert "s3cret-pw" not in done.output


def test_each_address_a_command_takes_from_the_local_stack_is_said_once_and_refused_without_a_stack(tmp_path):
    from streamfill.errors import OptionError
    from streamfill.settings import Settings, as_command

    told: list[str] = []
    with_stack = Settings(home=stack_home(tmp_path / "a", "s3cret-pw"), kafka_port=19092, db_url=None,
                          kafka_bootstrap_servers=None, schema_registry_url=None, spark_remote=None)
    without = with_stack.model_copy(update={"home": stack_home(tmp_path / "b", None)})
    given = without.model_copy(update={"db_url": "postgresql+psycopg2://u@db:5432/x",
                                       "kafka_bootstrap_servers": "kafka:9092"})
    assert without.bootstrap_servers == "127.0.0.1:19092"  # not a command (a Spark worker, a test): as before
    with as_command(told.append):
        for _ in range(2):
            assert with_stack.kafka_client()["bootstrap.servers"] == "127.0.0.1:19092"
            assert with_stack.offsets_db_url.startswith("postgresql+psycopg2://streamfill:s3cret-pw@127.0.0.1:")
        with_stack.schema_registry()
        assert with_stack.spark_remote_url.startswith("sc://127.0.0.1:")
        for setting, read in {"STREAMFILL_DB_URL": lambda: without.offsets_db_url,
                              "STREAMFILL_KAFKA_BOOTSTRAP_SERVERS": without.kafka_client,
                              "STREAMFILL_SCHEMA_REGISTRY_URL": without.schema_registry,
                              "STREAMFILL_SPARK_REMOTE": lambda: without.spark_remote_url}.items():
            with pytest.raises(OptionError, match=f"setting {setting}=None: is not set"):
                read()
        assert (given.offsets_db_url, given.bootstrap_servers) == ("postgresql+psycopg2://u@db:5432/x", "kafka:9092")
    assert [line.split(":")[0] for line in told] == ["Kafka", "offsets_db", "schema registry", "Spark Connect"]
    assert all("(STREAMFILL_" in line and "s3cret-pw" not in line for line in told), told
    assert "postgresql+psycopg2://streamfill:***@127.0.0.1:" in told[1]
    told.clear()
    assert "@127.0.0.1:5432/streamfill" in without.offsets_db_url and told == []  # the command ended: as before
