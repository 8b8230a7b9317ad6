"""streamfill installed as a wheel into an Airflow it did not create, as a team would do it: the wheel installed
with `pip install --no-deps` into a venv that already has Airflow and the third-party packages, the short DAG file
(dags/streamfill_dags.py, docs/infrastructure.md) in that Airflow's DAG folder, the jobs file somewhere else named
by the Airflow Variable streamfill_jobs_file, the connections from the environment (AIRFLOW_CONN_*), a metadata
database, AIRFLOW_HOME, ports and processes of its own, and Airflow's FAB auth manager with two users whose roles
read the DAGs of different entries, trigger their own entry's stream and the replay form every team shares. One
cold start of that Airflow serves every test here (tests/existing_airflow.py
makes it); the jobs run against the stack's Kafka (its SASL_SSL listener) and PostgreSQL."""

from __future__ import annotations

import json
import secrets
import subprocess
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from streamfill import REPO_ROOT, dag_ids
from streamfill.cli.stack.airflow import connections, kafka_client
from streamfill.kafka_client import KAFKA_CONNECTION
from streamfill.orchestration.airflow_api import AirflowApi
from streamfill.orchestration.connections import API_CONNECTION
from streamfill.orchestration.job_names import replay_job
from streamfill.orchestration.jobs_file_variable import VARIABLE
from streamfill.orchestration.ui import PREFIX, TRIGGER_ACCESS
from streamfill.settings import Settings
from streamfill.spark_jobs.pipelines import read
from tests.existing_airflow import (
    FAB,
    TheirAirflow,
    install,
    metadata_database,
    third_party_venv,
    wheel_version,
)
from tests.job_helpers import orders_columns
from tests.shared_run import OWN_AIRFLOW_GROUP

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group(OWN_AIRFLOW_GROUP)]

COLUMNS = orders_columns(4)

# FAB's roles and users, made the way `airflow roles` and `airflow users` make them: Admin may do everything, a
# team's role what team_grants gives (passwords come in the environment)
USERS = textwrap.dedent("""
    import json, os
    from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder

    with get_application_builder() as builder:
        sm = builder.sm
        sm.sync_roles()
        for user, granted in json.loads(os.environ["TEST_GRANTS"]).items():
            role = sm.find_role("Admin") if granted is None else sm.add_role("team_" + user)
            for action, resource in granted or []:
                sm.add_permission_to_role(role, sm.create_permission(action, resource))
            assert sm.add_user(user, user, "test", user + "@example.com", role,
                               password=os.environ["PASSWORD_" + user.upper()]), user
""")


def team_grants(entry: str) -> list[tuple[str, str]]:
    """A team's role: reads DAG runs and its entry's DAGs; triggers its entry's stream and the replay form every
    team shares (reading that form's runs shows no team another's jobs on the page)."""
    reads = ["DAG Runs", *(f"DAG:{d}" for d in dag_ids.of_entry(entry, True)), f"DAG:{dag_ids.REPLAY}"]
    return [*(("can_read", r) for r in reads), ("can_create", "DAG Runs"),
            ("can_edit", f"DAG:{dag_ids.stream(entry)}"), ("can_edit", f"DAG:{dag_ids.REPLAY}")]


def issued_name() -> str:
    """A name like the topic_name fixture's, removed with what it names at the session's end (tests/cleanup.py)."""
    from tests import conftest

    name = f"t_{uuid.uuid4().hex[:10]}"
    conftest.ISSUED.append(name)
    return name


def timed(timings: dict, what: str, started: float) -> float:
    timings[what] = round(time.monotonic() - started, 1)
    return time.monotonic()


@pytest.fixture(scope="module")
def their_airflow(stack_settings, tmp_path_factory, project_wheel):
    root = tmp_path_factory.mktemp("their_airflow")
    timings: dict[str, float] = {}
    t = time.monotonic()
    wheel, version = project_wheel, wheel_version(project_wheel)
    # one top-level import name in their environment
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"streamfill", f"streamfill-{version}.dist-info"}, tops
    python = third_party_venv(root / "venv")
    before = subprocess.run([str(python), "-c", "import airflow, pyspark, streamfill"], cwd=root,
                            capture_output=True, text=True, timeout=120)
    assert before.returncode != 0 and "No module named 'streamfill'" in before.stderr, before.stderr[-2000:]
    install(python, wheel)
    where = subprocess.run([str(python), "-c", "import streamfill.orchestration as o; print(o.__file__)"], cwd=root,
                           capture_output=True, text=True, timeout=120)
    assert where.stdout.startswith(str(root / "venv")), where.stdout + where.stderr  # the wheel's, not the checkout
    t = timed(timings, "venv and install", t)

    teams = {"alice": issued_name(), "bob": issued_name()}  # each user's entry, named like its topic
    jobs_file = root / "their_config" / "streamfill_jobs.yaml"  # not in the DAG folder: the Variable names it
    jobs_file.parent.mkdir()
    jobs_file.write_text("jobs:\n" + "".join(f"  {name}:\n    topic: {name}\n    table: {name}_events\n"
                                             + COLUMNS for name in teams.values()))
    assert set(read(jobs_file)) == set(teams.values())
    dags_folder = root / "dags"
    dags_folder.mkdir()
    for name in ("streamfill_dags.py", "streamfill_broken_entries.py"):  # the two files a team adds
        (dags_folder / name).write_text((REPO_ROOT / "dags" / name).read_text())
    dag_file = dags_folder / "streamfill_dags.py"
    passwords = {user: secrets.token_urlsafe(16) for user in ("admin", *teams)}
    grants = {"admin": None, **{user: team_grants(name) for user, name in teams.items()}}

    with metadata_database(stack_settings) as db_url:
        # the cluster as a team holds it: a connection of the apache-kafka provider's type `kafka`, its extra the
        # librdkafka configuration of the stack's SASL_SSL listener, password included
        kafka = {"conn_type": "kafka", "extra": kafka_client(stack_settings)}
        assert kafka_client(stack_settings)["security.protocol"] == "SASL_SSL"
        airflow = TheirAirflow(root, python, stack_settings.host, db_url, {
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder), "AIRFLOW__CORE__AUTH_MANAGER": FAB,
            "STREAMFILL_HOME": str(root / "streamfill_home"), **connections(stack_settings),
            f"AIRFLOW_CONN_{KAFKA_CONNECTION.upper()}": json.dumps(kafka)})
        # the replay form asks this Airflow's API who triggered its run, as its admin (not the stack's Airflow)
        airflow.env[f"AIRFLOW_CONN_{API_CONNECTION.upper()}"] = json.dumps(
            {"conn_type": "http", "host": airflow.url, "login": "admin", "password": passwords["admin"]})
        for args in (("db", "migrate"), ("variables", "set", VARIABLE, str(jobs_file))):
            done = airflow.cli(*args, timeout=600)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        made = airflow.run_python(USERS, env={"TEST_GRANTS": json.dumps(grants),
                                              **{f"PASSWORD_{u.upper()}": p for u, p in passwords.items()}})
        assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
        t = timed(timings, "metadata database, variable and users", t)
        airflow.start()
        try:
            airflow.wait_healthy(timeout=300)
            timed(timings, "cold start", t)
            settings = Settings(host=stack_settings.host, airflow_port=airflow.port)
            yield SimpleNamespace(airflow=airflow, teams=teams, dag_file=dag_file, settings=settings,
                                  timings=timings, api=lambda user: AirflowApi(settings, (user, passwords[user])),
                                  version=version)
        finally:
            left = airflow.stop()
            print(f"their Airflow: {timings}")
        assert left == [], f"processes left of {left}"


def wait_for_dags(api: AirflowApi, want: set[str], timeout: float = 300) -> dict:
    """The DAGs' listing once the DAG processor has parsed the file (it starts with a first parse)."""
    deadline = time.monotonic() + timeout
    while True:
        errors = api.call("GET", "/api/v2/importErrors")["import_errors"]
        assert errors == [], errors[0]["stack_trace"][-3000:]
        found = {d["dag_id"]: d for d in api.call("GET", "/api/v2/dags?tags=streamfill&limit=100")["dags"]}
        if set(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(1)


@pytest.fixture(scope="module")
def replayed(their_airflow, bootstrap):
    """The DAGs parsed from the short file, and one replay of alice's entry triggered by alice through that
    Airflow's REST API into the form's default table: its run, what was produced and how long it took."""
    from streamfill.spark_jobs.demo.produce import ensure_topic, produce

    their = their_airflow
    api = their.api("admin")
    alice = their.teams["alice"]
    t = time.monotonic()
    want = {d for name in their.teams.values() for d in dag_ids.of_entry(name, True)} | {dag_ids.REPLAY,
                                                                                        dag_ids.MAINTENANCE}
    dags = wait_for_dags(api, want)
    assert set(dags) == want, (sorted(dags), their.airflow.tail())
    t = timed(their.timings, "DAGs parsed", t)
    ensure_topic(bootstrap, alice, 2)
    produced = produce(bootstrap, alice, 600, bad_ratio=0.05, seed=int(time.time()))
    api.set_paused(dag_ids.REPLAY, False)  # Airflow pauses a new DAG unless told otherwise
    table = f"{alice}_events_replay"  # the form's default for her entry
    run_id = their.api("alice").trigger(dag_ids.REPLAY, {"job": alice, "from": "earliest", "to": "latest",
                                                         "mode": "append-new"})
    state = api.wait(dag_ids.REPLAY, run_id, timeout=900)
    timed(their.timings, "replay run", t)
    return SimpleNamespace(api=api, dags=dags, run_id=run_id, state=state, produced=produced, table=table)


def test_the_wheel_in_their_airflow_parses_the_short_dag_file_and_a_replay_lands_its_rows(their_airflow, replayed,
                                                                                        db):
    their, api = their_airflow, replayed.api
    # every DAG belongs to the team's file, though the factory that made them is in the installed package
    details = api.call("GET", f"/api/v2/dags/{dag_ids.REPLAY}/details")
    assert details["fileloc"] == str(their.dag_file)
    errors = their.airflow.cli("dags", "list-import-errors", "-o", "json")
    assert errors.returncode == 0 and json.loads(errors.stdout.strip().splitlines()[-1]) == [], errors.stdout
    # the wheel is a provider there: its connection types come with their form's fields
    providers = {p["package_name"]: p for p in api.call("GET", "/api/v2/providers?limit=100")["providers"]}
    assert providers["streamfill"]["version"] == their.version
    forms = {h["connection_type"]: h for h in api.call("GET", "/ui/connections/hook_meta")}
    assert set(forms["streamfill_kafka"]["extra_fields"]) >= {"bootstrap_servers", "security_protocol", "group_id"}
    # the page comes from the wheel's entry point (that Airflow has no plugins folder)
    plugins = api.call("GET", "/api/v2/plugins")["plugins"]
    assert [p["source"] for p in plugins if p["name"] == "streamfill"] == [
        f"streamfill=={their.version}: EntryPoint(name='streamfill', value='streamfill.orchestration.ui.plugin:"
        "StreamfillPlugin', group='airflow.plugins')"]

    assert replayed.state == "success", their.airflow.tail()
    alice = their.teams["alice"]
    with db.connect() as conn:
        rows = conn.scalar(text(f'SELECT count(*) FROM "{replayed.table}"'))
        dead = conn.scalar(text("SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                                "WHERE j.name LIKE :j"), {"j": f"{alice}.replay.%"})
        runs = conn.execute(text("SELECT r.dag_id, r.airflow_run_id FROM runs r JOIN jobs j ON j.id = r.job_id "
                                 "WHERE j.name LIKE :j"), {"j": f"{alice}.replay.%"}).all()
    assert (rows, dead) == (replayed.produced.valid, replayed.produced.bad)
    assert [tuple(r) for r in runs] == [(dag_ids.REPLAY, replayed.run_id)]


def get(url: str, token: str) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def job_routes(job: str, topic: str) -> list[str]:
    """Every route of the page about one job: its views, plots, dead letters and offset finder."""
    find = f"?topic={topic}&partition=0&offset=0"
    return [f"/jobs/{job}", f"/jobs/{job}/dead-letters", f"/jobs/{job}/find{find}", f"/api/jobs/{job}/lag",
            f"/api/jobs/{job}/throughput", f"/api/jobs/{job}/dead-letters", f"/api/jobs/{job}/quality",
            f"/api/jobs/{job}/data-loss", f"/api/jobs/{job}/find{find}"]


def test_the_page_shows_each_user_only_the_jobs_of_the_dags_their_role_reads(their_airflow, replayed,
                                                                            stack_settings):
    from streamfill.offsets_db.store import OffsetStore

    their = their_airflow
    assert replayed.state == "success", their.airflow.tail()
    alice, bob = their.teams["alice"], their.teams["bob"]
    store = OffsetStore(stack_settings.offsets_db_url)
    # bob's entry streamed from the CLI (no DAG launched it), and a CLI backfill under a name of no entry
    store.ensure_job(bob, "stream", {})
    adhoc = f"{alice}-adhoc"
    store.ensure_job(adhoc, "backfill", {})
    store.engine.dispose()
    tokens = {user: their.api(user).token for user in ("admin", "alice", "bob")}
    base = f"{their.airflow.url}/streamfill"
    listed = {user: json.loads(get(f"{base}/api/jobs?limit=100000", token)[1]) for user, token in tokens.items()}
    names = {user: {job["name"] for job in page["jobs"]} for user, page in listed.items()}
    replay_job = next(n for n in names["admin"] if n.startswith(f"{alice}.replay."))
    own = {"alice": (replay_job, alice), "bob": (bob, bob)}
    assert names["alice"] == {replay_job} and listed["alice"]["total"] == 1
    assert names["bob"] == {bob} and listed["bob"]["total"] == 1
    assert {replay_job, bob, adhoc} <= names["admin"]
    overview = {user: get(f"{base}/", token) for user, token in tokens.items()}
    assert overview["alice"][0] == 200 and replay_job in overview["alice"][1]
    assert bob not in overview["alice"][1] and adhoc not in overview["alice"][1]

    groups = json.loads(get(f"{base}/api/jobs/{replay_job}/dead-letters", tokens["alice"])[1])
    assert sum(g["count"] for g in groups) == replayed.produced.bad  # the data, for whoever may read it
    reasons = {g["reason"] for g in groups}
    for user, token in tokens.items():
        for owner, (job, topic) in own.items():
            want = 200 if user in ("admin", owner) else 404
            answers = {route: get(base + route, token) for route in job_routes(job, topic)}
            assert {r: status for r, (status, _) in answers.items()} == {r: want for r in answers}, (user, job)
            if want == 404:  # nothing of the job but the name asked for; no job the user may not see
                hidden = ({replay_job, bob, adhoc} - {job} - {own[user][0]} if user in own else set())
                for route, (_, body) in answers.items():
                    assert not [n for n in hidden | reasons if n in body], (user, route, body)
        adhoc_status = {get(base + route, token)[0] for route in job_routes(adhoc, alice)}
        assert adhoc_status == ({200} if user == "admin" else {404}), (user, adhoc_status)


def test_the_replay_form_lets_a_team_replay_only_its_own_entry_into_its_own_tables_and_a_refusal_records_nothing(
        their_airflow, replayed, db):
    """Both teams may trigger the replay form every team shares; its first task refuses a run whose user may not
    trigger the entry's DAGs, or that names a table not the entry's, before anything is recorded."""
    their = their_airflow
    assert replayed.state == "success", their.airflow.tail()
    alice, bob = their.teams["alice"], their.teams["bob"]
    tries = {  # bob upserting alice's topic into alice's table; alice's topic into bob's table
        "bob": ({"job": alice, "from": "earliest", "to": "latest", "mode": "replace", "table": f"{alice}_events"},
                f"may not trigger {dag_ids.stream(alice)}"),
        "alice": ({"job": alice, "from": "earliest", "to": "latest", "mode": "append-new", "table": f"{bob}_events"},
                  "into its own tables only"),
    }
    for user, (conf, why) in tries.items():
        run_id = their.api(user).trigger(dag_ids.REPLAY, conf)
        assert replayed.api.wait(dag_ids.REPLAY, run_id, timeout=900) == "failed", (user, their.airflow.tail())
        run = urllib.parse.quote(run_id)
        states = {t["task_id"]: t["state"] for t in replayed.api.call(
            "GET", f"/api/v2/dags/{dag_ids.REPLAY}/dagRuns/{run}/taskInstances")["task_instances"]}
        assert states == {"validate_replay": "failed", "run_replay": "upstream_failed",
                          "quality": "upstream_failed"}, (user, states)
        log = json.dumps(replayed.api.call("GET", f"/api/v2/dags/{dag_ids.REPLAY}/dagRuns/{run}/taskInstances/"
                                                  "validate_replay/logs/1?full_content=true"))
        assert f"user {user!r}" in log and why in log and f"entry {alice!r}" in log and conf["table"] in log, \
            log[-3000:]
    # who triggered a run, and what that user may trigger, is for the API connection's user (an admin) to ask
    ask = f"{their.airflow.url}{PREFIX}{TRIGGER_ACCESS}?dag_id={dag_ids.REPLAY}&run_id={urllib.parse.quote(run_id)}"
    assert get(ask, their.api("bob").token)[0] == 403
    refused = [replay_job(alice, c["from"], c["to"], c["table"]) for c, _ in tries.values()]
    with db.connect() as conn:
        assert conn.execute(text("SELECT name FROM jobs WHERE name = ANY(:n)"), {"n": refused}).all() == []
        for table in (f"{alice}_events", f"{bob}_events"):
            assert conn.scalar(text("SELECT to_regclass(:t)"), {"t": f"public.{table}"}) is None, table
