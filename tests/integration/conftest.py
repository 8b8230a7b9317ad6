"""Fixtures of the integration tests that need a service of their own, to break it without breaking the stack."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from streamfill.settings import Settings
from tests.shared_run import worker_index


def worker_ports(start: int) -> range:
    """Ports of this worker's own: two workers starting a private service at once never pick the same one."""
    first = start + 20 * worker_index()
    return range(first, first + 20)


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory) -> Path:
    """The project's wheel as a clone without tags builds it (tests/existing_airflow.py), once per worker: the
    tests that install it run in one xdist group."""
    from tests.existing_airflow import build_wheel

    return build_wheel(tmp_path_factory.mktemp("project_wheel"))


@pytest.fixture
def private_postgres(stack_settings):
    """A PostgreSQL of its own (the shared one also holds Airflow's metadata, which must not go away)."""
    from tests.private_services import private_postgres

    with private_postgres(stack_settings, worker_ports(stack_settings.pg_port + 100)) as postgres:
        yield postgres


@pytest.fixture
def private_kafka(stack_settings):
    """A broker of its own (the stack's serves every other test), with the stack's jars."""
    from streamfill.cli.stack.kafka import Kafka
    from streamfill.cli.stack.process import port_free

    free = [p for p in worker_ports(stack_settings.kafka_port + 300) if port_free(stack_settings.host, p)]
    settings = Settings(home=stack_settings.home / f"test-kafka-{uuid.uuid4().hex[:8]}", kafka_port=free[0],
                        kafka_controller_port=free[1], kafka_sasl_port=free[2], kafka_oauth_port=free[3],
                        kafka_bootstrap_servers=None)
    kafka = Kafka(settings)
    kafka.root.mkdir(parents=True)
    kafka.libs.symlink_to(Kafka(stack_settings).libs)
    kafka.prepare()
    kafka.start()
    yield kafka
    kafka.stop()
    shutil.rmtree(settings.home, ignore_errors=True)


@pytest.fixture
def screenshot(browser, tmp_path):
    """screenshot(name): the browser's window as <name>.png in the test's directory and, when STREAMFILL_SCREENSHOTS
    names a directory (`make screenshots` gives docs/images), there too: the documentation's pictures are these."""
    into = os.environ.get("STREAMFILL_SCREENSHOTS")

    def take(name: str) -> Path:
        path = tmp_path / f"{name}.png"
        browser.save_screenshot(str(path))
        if into:
            Path(into).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(into) / path.name)
        return path

    return take


@pytest.fixture
def browser():
    """Headless Chromium (Debian's chromium and chromedriver), driven by Selenium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.fail("chromium and chromium-driver are missing: `make browser` installs them")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service(driver), options=opts)
    d.implicitly_wait(2)
    yield d
    d.quit()
