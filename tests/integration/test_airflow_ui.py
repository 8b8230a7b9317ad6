"""The Airflow UI in headless Chromium (Debian's chromium and chromedriver, driven by Selenium): log in, fill
streamfill_replay's Params form, trigger, and see the run succeed."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import text

from streamfill import dag_ids
from streamfill.cli.stack.airflow import admin_password
from streamfill.orchestration.airflow_api import AirflowApi
from streamfill.spark_jobs.demo.produce import ensure_topic, produce
from tests.airflow_helpers import replay_form_offers
from tests.kafka_helpers import end_offsets
from tests.shared_run import AIRFLOW_GROUP
from tests.ui_helpers import log_in, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.xdist_group(AIRFLOW_GROUP)]


def test_a_user_triggers_a_replay_from_the_params_form_and_sees_it_succeed(browser, screenshot, stack_settings,
                                                                         bootstrap, db, topic_name):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    api = AirflowApi(stack_settings)
    replay_form_offers(api, stack_settings, "orders")  # the form's default job, which this user keeps
    ensure_topic(bootstrap, "orders", 4)
    before = end_offsets(bootstrap, "orders")
    produce(bootstrap, "orders", 500, seed=int(time.time()))
    after = end_offsets(bootstrap, "orders")
    table = f"{topic_name}_ui"
    base = f"http://{stack_settings.host}:{stack_settings.airflow_port}"

    log_in(browser, base, admin_password(stack_settings))

    browser.get(f"{base}/dags/{dag_ids.REPLAY}")
    wait_for(lambda: [b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Trigger"],
             what="the Trigger button")[0].click()

    def field(name: str):  # the Params form renders each param as an input with id element_<name>
        return wait_for(lambda: browser.find_element(By.ID, f"element_{name}"), what=f"the form field {name}")

    for name, value in (("from", json.dumps({str(p): o for p, o in before.items()})),
                        ("to", json.dumps({str(p): o for p, o in after.items()})), ("table", table)):
        box = field(name)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(value)
    screenshot("airflow-replay-form")
    buttons = [b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Trigger"]
    buttons[-1].click()  # the dialog's own Trigger, below the form

    def triggered():  # the run this form made: its conf names the test's table (other runs may be queued)
        runs = api.call("GET", f"/api/v2/dags/{dag_ids.REPLAY}/dagRuns?order_by=-run_after&limit=20")["dag_runs"]
        return next((r for r in runs if (r.get("conf") or {}).get("table") == table), None)

    run_id = wait_for(triggered, what=f"the new run with table {table}")
    assert run_id["conf"]["from"] == json.dumps({str(p): o for p, o in before.items()}), run_id["conf"]
    assert api.wait(dag_ids.REPLAY, run_id["dag_run_id"], timeout=900) == "success"

    # and the UI shows it: the run's page lists it as success
    browser.get(f"{base}/dags/{dag_ids.REPLAY}/runs/{run_id['dag_run_id']}")
    wait_for(lambda: "success" in browser.page_source.lower(), what="the run's success state")
    screenshot("airflow-replay-run")
    with db.connect() as conn:
        rows = conn.execute(text(f'SELECT count(*) FROM "{table}"')).scalar()
    assert rows == sum(after.values()) - sum(before.values())
