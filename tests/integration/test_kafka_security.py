"""The stack's SASL_SSL listener (SCRAM-SHA-512, its own CA, the authorizer on), as a team's cluster: a backfill,
a stream and the Kafka sink land each record once with credentials, and commitToGroup mirrors every commit into
its group; the secrets reach no argv, log, Spark UI page or offsets_db row; a wrong password, a missing ACL and an
untrusted certificate are refused with what to set, before anything is recorded."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramMechanism,
    UserScramCredentialDeletion,
)
from sqlalchemy import text

from streamfill import REPO_ROOT
from streamfill.cli.stack.kafka import grant_scram_user
from streamfill.connectors.kafka.broker import Broker
from streamfill.connectors.kafka.planner import OffsetRange
from streamfill.errors import BrokerError, OptionError
from streamfill.kafka_client import settings_env
from streamfill.partitions import TopicPartition
from streamfill.spark_jobs import backfill, stream
from streamfill.spark_jobs.demo.produce import ensure_topic, produce

pytestmark = pytest.mark.integration


def query(db, sql: str, **params) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


@pytest.fixture(scope="module")
def secured(stack_settings) -> dict[str, str]:
    """librdkafka settings of the SASL_SSL listener as the jobs' user."""
    return stack_settings.kafka_secured_client()


@pytest.fixture
def limited_user(stack_settings, topic_name):
    """(name, password) of a SCRAM user that may DESCRIBE `topic_name` and nothing else; removed afterwards."""
    admin = AdminClient({"bootstrap.servers": stack_settings.bootstrap_servers})
    name, password = f"limited-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    grant_scram_user(admin, name, password, [(ResourceType.TOPIC, topic_name, AclOperation.DESCRIBE)])
    yield name, password
    admin.delete_acls([AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, f"User:{name}", None,
                                        AclOperation.ANY, AclPermissionType.ANY)])
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_512)])


def log_ends(kafka: dict[str, str], topic: str, partitions: int) -> dict[int, int]:
    found = Broker(kafka).watermarks([TopicPartition(topic, p) for p in range(partitions)])
    return {tp.partition: high for tp, (_, high) in found.items()}


def landed_once(db, table: str, job: str, ends: dict[int, int]) -> None:
    """rows + dead letters = offsets consumed, per partition, nothing twice."""
    assert sum(ends.values()) > 0
    for p, end in ends.items():
        rows, distinct = query(db, f'SELECT count(*), count(DISTINCT "offset") FROM "{table}" WHERE partition = :p',
                               p=p)[0]
        dead = query(db, 'SELECT count(DISTINCT d."offset") FROM dead_letters d JOIN jobs j ON j.id = d.job_id '
                         "WHERE j.name = :j AND d.partition = :p", j=job, p=p)[0][0]
        assert rows == distinct and rows + dead == end, f"partition {p}: {rows} rows + {dead} dead letters != {end}"


def offsets_db_text(db, job: str) -> str:
    """Everything offsets_db holds about a job, as text."""
    return " ".join(row[0] for table in ("jobs", "runs", "batches", "dead_letters") for row in query(
        db, f"SELECT row_to_json(t)::text FROM {table} t WHERE {'id' if table == 'jobs' else 'job_id'} = "
            "(SELECT id FROM jobs WHERE name = :j)", j=job))


def backfilled_once(spark, settings, db, kafka: dict[str, str], topic: str, count: int, chunk: int) -> str:
    """`count` demo events produced through `kafka` into a new topic of two partitions, backfilled through it in
    chunks of `chunk`: each record lands once. Returns the job."""
    ensure_topic(kafka, topic, 2)
    produce(kafka, topic, count, bad_ratio=0.05, seed=3)
    job, table = f"{topic}-secured", f"{topic}_secured"
    args = backfill.BackfillArgs(job, topic, "earliest", "latest", table, chunk_size=chunk, pipeline="orders")
    summary = backfill.run(args, spark, kafka, settings.offsets_db_url)
    assert summary.rows + summary.dead_letters == count
    landed_once(db, table, job, log_ends(kafka, topic, 2))
    return job


def test_over_sasl_ssl_a_backfill_and_the_kafka_sink_land_each_record_once(spark, stack_settings, secured, db,
                                                                          topic_name):
    job = backfilled_once(spark, stack_settings, db, secured, topic_name, 600, 400)
    assert secured["sasl.password"] not in offsets_db_text(db, job)

    # the Kafka sink, with a Spark user's own options: the JAAS line and a PEM trust store
    out = f"{topic_name}-out"
    ensure_topic(secured, out, 1)
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{secured["sasl.username"]}" password="{secured["sasl.password"]}";')
    (spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(250)], "key string, value string")
     .write.format("streamfill_kafka").mode("append").option("kafka.bootstrap.servers", secured["bootstrap.servers"])
     .option("kafka.security.protocol", "SASL_SSL").option("kafka.sasl.mechanism", "SCRAM-SHA-512")
     .option("kafka.sasl.jaas.config", jaas).option("kafka.ssl.truststore.type", "PEM")
     .option("kafka.ssl.truststore.location", secured["ssl.ca.location"]).option("topic", out).save())
    back = (spark.read.format("streamfill_kafka").options(**{f"kafka.{k}": v for k, v in secured.items()})
            .option("subscribe", out).load().selectExpr("CAST(value AS STRING) AS v").collect())
    assert sorted(r.v for r in back) == sorted(f"v{i}" for i in range(250))

    # a plan's text lists the source's options with the secrets' values hidden, the JAAS line's included
    plan = (spark.readStream.format("streamfill_kafka").options(**{f"kafka.{k}": v for k, v in secured.items()})
            .option("kafka.sasl.jaas.config", jaas).option("subscribe", out).load()._jdf.queryExecution().toString())
    assert "kafka.sasl.jaas.config=*********(redacted)" in plan and secured["sasl.password"] not in plan


def test_over_oauthbearer_tokens_a_backfill_lands_each_record_once(spark, stack_settings, db, topic_name):
    """The token path end to end: librdkafka's OAUTHBEARER against the stack's listener whose tokens Kafka's
    unsecured validator checks (a production cluster takes oidc client credentials through the same settings)."""
    backfilled_once(spark, stack_settings, db, stack_settings.kafka_oauth_client(), topic_name, 300, 200)


def test_a_stream_given_credentials_in_its_environment_shows_them_in_no_argv_log_spark_ui_or_offsets_db(
        stack_settings, secured, db, topic_name, tmp_path):
    ensure_topic(secured, topic_name, 2)
    produce(secured, topic_name, 400, bad_ratio=0.05, seed=4)
    job, table = f"{topic_name}-stream", f"{topic_name}_stream"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFILL_KAFKA_")}
    proc = subprocess.Popen([sys.executable, "-m", "streamfill.cli.main", "stream", "--job", job, "--topic", topic_name,
                             "--table", table, "--pipeline", "orders", "--checkpoint", str(tmp_path / "ckpt"),
                             "--trigger", "1s"], cwd=REPO_ROOT, start_new_session=True,
                            env={**env, **settings_env(secured)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    password = secured["sasl.password"]
    try:
        deadline = time.monotonic() + 300
        while query(db, f"SELECT to_regclass('\"{table}\"') IS NOT NULL")[0][0] is False or query(
                db, f'SELECT count(*) FROM "{table}"')[0][0] + query(
                db, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j",
                j=job)[0][0] < 400:
            assert proc.poll() is None, "".join(lines)[-3000:]
            assert time.monotonic() < deadline, "the stream never landed the topic: " + "".join(lines)[-3000:]
            time.sleep(0.5)
        ui = next(m.group(1) for m in map(re.compile(r"Spark UI: (\S+)").search, list(lines)) if m)
        pages = [urllib.request.urlopen(ui + path, timeout=30).read().decode(errors="replace")
                 for path in ("/environment/", "/SQL/", "/StreamingQuery/", "/jobs/", "/api/v1/applications")]
        app = re.search(r'"id" : "([^"]+)"', pages[-1]).group(1)
        pages += [urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/{path}", timeout=30).read().decode()
                  for path in ("environment", "sql?details=true&planDescription=true")]
        assert f"streamfill-{job}" in pages[2] and "spark.app.name" in pages[5]  # the stream's own pages
        for page in pages:
            assert password not in page
        group = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(group) >= 2  # the CLI and its JVM, at least
        for pid in group:
            assert password not in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
    finally:
        proc.send_signal(signal.SIGTERM)  # the CLI stops its query between batches
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        reader.join(timeout=10)
    out = "".join(lines)
    assert proc.returncode == 0, out[-3000:]
    assert f"Kafka: bootstrap servers {secured['bootstrap.servers']} (SASL_SSL, SASL mechanism SCRAM-SHA-512, " \
           f"user {secured['sasl.username']})" in out
    assert password not in out and password not in offsets_db_text(db, job)
    landed_once(db, table, job, log_ends(secured, topic_name, 2))


def backfill_cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFILL_KAFKA_")}
    done = subprocess.run([sys.executable, "-m", "streamfill.cli.main", "backfill", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, env={**clean, **env}, timeout=300)
    return done.returncode, done.stdout + done.stderr


def test_a_wrong_password_a_missing_acl_and_an_untrusted_certificate_are_refused_before_anything_is_recorded(
        spark, stack_settings, secured, db, topic_name, limited_user, tmp_path):
    ensure_topic(secured, topic_name, 1)
    produce(secured, topic_name, 10, seed=5)
    flags = ("--topic", topic_name, "--table", f"{topic_name}_refused", "--from", "earliest", "--to", "latest",
             "--pipeline", "orders")
    listener = f"bootstrap servers {secured['bootstrap.servers']} (SASL_SSL, SASL mechanism SCRAM-SHA-512"

    code, out = backfill_cli(settings_env({**secured, "sasl.password": "wrong"}), "--job", f"{topic_name}-a", *flags)
    assert code == 78 and "authentication failed on " + listener in out, out[-2000:]  # refused
    assert "STREAMFILL_KAFKA_SASL_PASSWORD" in out and "wrong" not in out.replace("wrong password", "")

    user, password = limited_user
    code, out = backfill_cli(settings_env({**secured, "sasl.username": user, "sasl.password": password}),
                             "--job", f"{topic_name}-b", *flags)
    assert code == 78 and f"user {user} may not read topic '{topic_name}'" in out, out[-2000:]
    assert "--operation Read" in out and password not in out

    untrusted = {k: v for k, v in secured.items() if k != "ssl.ca.location"}
    code, out = backfill_cli(settings_env(untrusted), "--job", f"{topic_name}-c", *flags)
    assert code == 78 and "not trusted" in out and "STREAMFILL_KAFKA_SSL_CA_LOCATION" in out, out[-2000:]

    # a stream: refused before its table is made or its job recorded
    limited = {**secured, "sasl.username": user, "sasl.password": password}
    with pytest.raises(BrokerError, match=f"user {user} may not read topic '{topic_name}'"):
        stream.run(stream.StreamArgs(f"{topic_name}-d", topic_name, f"{topic_name}_refused", tmp_path / "ckpt",
                                     "available-now", None, pipeline="orders"), spark, limited,
                   stack_settings.offsets_db_url, threading.Event())
    # a Spark user's read: refused on the driver, before any task
    with pytest.raises(Exception, match=f"user {user} may not read topic '{topic_name}'"):
        (spark.read.format("streamfill_kafka").options(**{f"kafka.{k}": v for k, v in secured.items()})
         .option("kafka.sasl.username", user).option("kafka.sasl.password", password)
         .option("subscribe", topic_name).load().count())
    names = [f"{topic_name}-{x}" for x in "abcd"]
    assert query(db, "SELECT count(*) FROM jobs WHERE name = ANY(:n)", n=names) == [(0,)]
    assert query(db, "SELECT to_regclass(:t) IS NULL", t=f"{topic_name}_refused") == [(True,)]


def test_commit_to_group_over_sasl_ssl_leaves_the_groups_offsets_equal_to_offsets_db_after_every_commit(
        stack_settings, secured, db, topic_name, limited_user, monkeypatch):
    """commitToGroup on the SASL_SSL listener, through the source's record of the launch and the sink's commit
    (no Spark: both run in this process, as in the driver's): after each commit, a lag tool reading the group sees
    offsets_db's offsets. The committing process takes the secrets from its STREAMFILL_KAFKA_* settings, as
    streamfill's launches and Airflow's tasks give them; a launch whose process lacks them, or whose user may
    not commit the group, is refused at its start, before anything is recorded."""
    from streamfill.connectors.kafka import options as source_options
    from streamfill.connectors.spark import postgres_commit
    from streamfill.connectors.spark.source import _tracker
    from tests.integration.test_faults import _rows, _sink
    from tests.integration.test_postgres_sink import group_offsets

    ensure_topic(secured, topic_name, 2)
    produce(secured, topic_name, 200, seed=6)
    ends = log_ends(secured, topic_name, 2)
    job, table, group = f"{topic_name}-grp", f"{topic_name}_grp", f"{topic_name}-lag"
    url = stack_settings.offsets_db_url

    def launch(kafka: dict[str, str], job: str = job):
        """What the source does at its start: its options parsed, its record of the job in offsets_db made."""
        return _tracker(source_options.parse({**{f"kafka.{k}": v for k, v in kafka.items()}, "subscribe": topic_name,
                                              "job": job, "commitToGroup": group, "offsetsDbUrl": url},
                                             streaming=True), "stream")

    def settings_for(kafka: dict[str, str]) -> None:
        for name in [k for k in os.environ if k.startswith("STREAMFILL_KAFKA_")]:
            monkeypatch.delenv(name)
        for name, value in settings_env(kafka).items():
            monkeypatch.setenv(name, value)

    settings_for(secured)
    tracker = launch(secured)
    admin = AdminClient({"bootstrap.servers": stack_settings.bootstrap_servers})  # a lag tool, as the super user
    try:
        half = {p: e // 2 for p, e in ends.items()}
        for start, end in (({p: 0 for p in ends}, half), (half, ends)):  # two batches, two commits
            tracker.store.record_planned(job, [OffsetRange(topic_name, p, start[p], end[p]) for p in ends],
                                         generation=tracker.generation)
            plan = _sink(table, job, tracker.generation, url)
            postgres_commit.commit(plan, [_rows(plan, topic_name, start[p], end[p], p) for p in ends], None)
            latest = dict(query(db, "SELECT partition, next_offset FROM latest_offsets WHERE job = :j", j=job))
            assert latest == end
            assert group_offsets(admin, group, topic_name) == latest, "the group mirrors every commit"
    finally:
        tracker.release()
    assert secured["sasl.password"] not in offsets_db_text(db, job)
    admin.delete_consumer_groups([group])[group].result(30)

    refused = f"{topic_name}-refused"
    settings_for({})  # a Spark user's session given the password as an option only
    with pytest.raises(OptionError, match=r"commitToGroup=.*kafka\.sasl\.password.*STREAMFILL_KAFKA_SASL_PASSWORD"):
        launch(secured, refused)
    user, password = limited_user
    limited = {**secured, "sasl.username": user, "sasl.password": password}
    settings_for(limited)
    with pytest.raises(BrokerError, match=f"user {user} may not read consumer group '{group}'"):
        launch(limited, refused)
    assert query(db, "SELECT count(*) FROM jobs WHERE name = :j", j=refused) == [(0,)]


def test_a_group_start_reads_a_groups_offsets_over_sasl_ssl_and_refuses_a_user_who_may_not_describe_it(
        secured, topic_name, limited_user):
    """`start: group:NAME` on the SASL_SSL listener (no Spark: what the source asks the broker at a first launch):
    the group's committed offset where it has one, earliest where not; a user without DESCRIBE on the group is
    refused, named, with the ACL to ask for."""
    from streamfill.connectors.kafka import group_start
    from streamfill.connectors.kafka.offsets import EARLIEST, SpecificOffsets
    from tests.kafka_helpers import commit_as_connect

    ensure_topic(secured, topic_name, 2)
    produce(secured, topic_name, 40, seed=7)
    group = f"connect-{topic_name}-sink"
    commit_as_connect(secured, group, topic_name, {0: 7})  # as a Connect sink's task commits when it stops
    partitions = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
    assert group_start.offsets_of(group, partitions, Broker(secured)) == SpecificOffsets(
        ((partitions[0], 7), (partitions[1], EARLIEST)))
    user, password = limited_user
    with pytest.raises(BrokerError, match=f"user {user} may not describe consumer group '{group}'"):
        group_start.offsets_of(group, partitions, Broker({**secured, "sasl.username": user, "sasl.password": password}))
