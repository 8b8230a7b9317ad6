"""The streamfill page in the Airflow UI: behind Airflow's login, and showing what a short run of the demo job
(`orders`, launched through its stream DAG) wrote to offsets_db: the job, its lag plot with one point per batch,
its dead letters by reason, and the batch that read a known offset. One stream run serves every check."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest
from sqlalchemy import text

from streamfill import dag_ids
from streamfill.cli.stack.airflow import admin_password, reserialize
from streamfill.orchestration.airflow_api import AirflowApi
from streamfill.spark_jobs.demo.produce import ensure_topic, produce
from tests.kafka_helpers import end_offsets
from tests.shared_run import AIRFLOW_GROUP
from tests.ui_helpers import log_in, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(AIRFLOW_GROUP)]

ENDPOINTS = ["/streamfill/", "/streamfill/api/jobs", "/streamfill/jobs/orders", "/streamfill/api/jobs/orders/lag",
             "/streamfill/api/jobs/orders/throughput", "/streamfill/api/jobs/orders/dead-letters",
             "/streamfill/api/jobs/orders/quality", "/streamfill/api/jobs/orders/data-loss",
             "/streamfill/api/jobs/orders/find?topic=orders&partition=0&offset=0",
             "/streamfill/jobs/orders/dead-letters", "/streamfill/static/plotly.min.js"]


def status_of(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def query(db, sql: str, **params) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


def test_the_page_and_its_data_answer_only_a_logged_in_user(stack_settings):
    base = f"http://{stack_settings.host}:{stack_settings.airflow_port}"
    assert {p: status_of(base + p) for p in ENDPOINTS} == {p: 401 for p in ENDPOINTS}
    forged = {p: status_of(base + p, {"Authorization": "Bearer not-a-token"}) for p in ENDPOINTS}
    assert forged == {p: 403 for p in ENDPOINTS}
    token = AirflowApi(stack_settings).token
    assert status_of(base + "/streamfill/api/jobs", {"Authorization": f"Bearer {token}"}) == 200
    assert status_of(base + "/streamfill/", {"Cookie": f"_token={token}"}) == 200


@pytest.fixture(scope="module")
def demo_run(stack_settings, bootstrap):
    """A short run of the demo job through its stream DAG (available-now): batches, a run Airflow launched, and
    the demo's dead letters."""
    reserialize(stack_settings)
    ensure_topic(bootstrap, "orders", 4)
    produce(bootstrap, "orders", 4000, bad_ratio=0.05, seed=int(time.time()))
    api = AirflowApi(stack_settings)
    run_id = api.trigger(dag_ids.stream("orders"), {"trigger": "available-now"})
    assert api.wait(dag_ids.stream("orders"), run_id, timeout=900) == "success"
    return run_id


@pytest.mark.browser
def test_a_user_sees_the_demo_job_its_lag_plot_dead_letters_and_finds_an_offset(browser, screenshot, stack_settings,
                                                                              db, demo_run):
    from selenium.webdriver.common.by import By

    base = f"http://{stack_settings.host}:{stack_settings.airflow_port}"
    log_in(browser, base, admin_password(stack_settings))

    # the nav entry opens the page inside the Airflow UI
    browser.get(base + "/plugin/streamfill")
    frame = wait_for(lambda: browser.find_element(By.TAG_NAME, "iframe"), what="the streamfill view")
    browser.switch_to.frame(frame)
    wait_for(lambda: browser.find_element(By.CSS_SELECTOR, "tr[data-job='orders']"), what="the orders row")
    browser.switch_to.default_content()
    assert wait_for(lambda: [a for a in browser.find_elements(By.TAG_NAME, "a") if a.text.strip() == "streamfill"],
                    what="the streamfill nav entry")
    screenshot("streamfill-in-airflow")

    browser.get(base + "/streamfill/")
    row = wait_for(lambda: browser.find_element(By.CSS_SELECTOR, "tr[data-job='orders']"), what="the orders row")
    assert "stream" in row.text and "succeeded" in row.text
    link = row.find_element(By.CSS_SELECTOR, "a[target='_top']").get_attribute("href")
    assert "/dags/streamfill_stream__orders/runs/" in link
    screenshot("streamfill-overview")

    window = "SELECT count(*) FROM lag_history WHERE job = 'orders' AND planned_at >= now() - interval '1 hour'"
    most = query(db, window)[0][0]
    browser.get(base + "/streamfill/jobs/orders?window=1h")
    points = wait_for(lambda: browser.execute_script(
        "const p = document.getElementById('lag-plot'); return p && p.data ? p.data[0].x.length : null;"),
        what="the lag plot")
    least = query(db, window)[0][0]
    assert least >= 1 and least <= points <= most  # one point per batch of the window
    assert browser.execute_script("return document.getElementById('lag-plot').data[0].name") == "total"
    screenshot("streamfill-job")

    browser.find_element(By.ID, "dead-letters-link").click()
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".reason-text"), what="the dead letters")
    shown = {e.text for e in browser.find_elements(By.CSS_SELECTOR, ".reason-text")}
    reasons = {r[0] for r in query(db, "SELECT DISTINCT split_part(d.error, ': ', 1) FROM dead_letters d JOIN jobs j "
                                       "ON j.id = d.job_id WHERE j.name = 'orders' AND d.created_at >= now() - "
                                       "interval '1 hour'")}
    assert reasons and shown == reasons
    assert browser.find_elements(By.CSS_SELECTOR, "pre.raw")  # the raw samples
    screenshot("streamfill-dead-letters")

    seq, partition, start = query(db, "SELECT batch_seq, partition, start_offset FROM offset_history WHERE job = "
                                      "'orders' AND committed AND end_offset > start_offset ORDER BY batch_seq DESC "
                                      "LIMIT 1")[0]
    browser.get(base + "/streamfill/jobs/orders")
    form = wait_for(lambda: browser.find_element(By.CSS_SELECTOR, "form.finder"), what="the offset finder")
    for name, value in (("topic", "orders"), ("partition", partition), ("offset", start)):
        form.find_element(By.NAME, name).send_keys(str(value))
    form.find_element(By.TAG_NAME, "button").click()
    found = wait_for(lambda: browser.find_element(By.ID, "found-batches"), what="the batch that read the offset")
    assert str(seq) in found.text.split()
    dead = query(db, 'SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = \'orders\' '
                     'AND d.topic = \'orders\' AND d.partition = :p AND d."offset" = :o', p=partition, o=start)[0][0]
    where = browser.find_element(By.ID, "dead-letter" if dead else "row-key").text
    assert (f"offset = {start}" in where) if not dead else "dead letter" in where
    screenshot("streamfill-offset-finder")
    api = json.loads(browser.execute_script(
        "return fetch(arguments[0]).then(r => r.text())", f"/streamfill/api/jobs/orders/find?topic=orders&partition="
        f"{partition}&offset={start}"))
    assert [b["batch_seq"] for b in api["batches"]][:1] == [seq]
    assert api["batches"][0]["airflow_run_id"] == demo_run  # and the run that read it


def get(url: str, token: str) -> tuple[int, str]:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}),
                                timeout=60) as resp:
        return resp.status, resp.read().decode()


def test_the_overview_shows_the_lag_now_and_says_when_it_lists_part_of_the_jobs(stack_settings, bootstrap, db,
                                                                              demo_run):
    base = f"http://{stack_settings.host}:{stack_settings.airflow_port}/streamfill"
    token = AirflowApi(stack_settings).token
    # records the stopped job has not read: the lag now counts them, whatever its last planning saw
    produce(bootstrap, "orders", 300, bad_ratio=0.0, seed=int(time.time()) + 1)
    ends = end_offsets(bootstrap, "orders")
    next_offsets = dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = 'orders' AND "
                                  "topic = 'orders'"))
    behind = {p: max(e - next_offsets.get(p, 0), 0) for p, e in ends.items()}
    jobs = json.loads(get(base + "/api/jobs", token)[1])
    orders = next(job for job in jobs["jobs"] if job["name"] == "orders")
    assert (orders["total_lag"], orders["max_lag"], orders["lag_measured"]) == (
        sum(behind.values()), max(behind.values()), "now")
    assert orders["total_lag"] >= 300 and jobs["broker_error"] is None

    # more jobs than the page lists: it says how many it shows and links to all of them
    total = query(db, "SELECT count(*) FROM jobs")[0][0]
    assert total >= 2
    # (the other test worker's jobs may add to the count between two requests: each answer is checked by itself)
    part = json.loads(get(base + "/api/jobs?limit=1", token)[1])
    assert (part["shown"], len(part["jobs"])) == (1, 1) and part["total"] >= total
    assert part["jobs"][0]["name"] == "orders"  # the jobs file's entries first
    status, html = get(base + "/?limit=1", token)
    shown = re.search(r"Showing 1 of ([0-9,]+) jobs", html)
    assert status == 200 and shown, html[-2000:]
    listed = int(shown.group(1).replace(",", ""))
    assert listed >= total and f'?limit={listed}"' in html
    assert "Showing" not in get(base + "/?limit=100000", token)[1]
    # the lag came from the stack's SASL_SSL listener with the connection's credentials, which no page shows
    password = stack_settings.kafka_password_file.read_text().strip()
    job_page = get(base + "/jobs/orders", token)
    assert job_page[0] == 200 and password not in html + json.dumps(jobs) + job_page[1]
