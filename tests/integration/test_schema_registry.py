"""Avro topics in Confluent's wire format through the stack's schema registry (Apicurio Registry): two writer
versions into one table, an unknown schema id as a dead letter, and the registry stopped mid-stream. The tests
that use the registry run one after another in one worker (xdist group), since one of them stops it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from sqlalchemy import text

from streamfill import REPO_ROOT
from streamfill.spark_jobs import stream
from tests.job_helpers import run_here
from tests.kafka_helpers import create_topic, produce

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("schema_registry")]

V1 = {"type": "record", "name": "Order", "namespace": "shop",
      "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


def query(db, sql: str, **params) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


def wire(schema_id: int, schema: dict, datum: dict) -> bytes:
    """Confluent's wire format: a zero byte, the schema id (4 bytes, big-endian), the Avro datum."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()


@pytest.fixture(scope="module")
def registry(stack_settings) -> SchemaRegistryClient:
    return SchemaRegistryClient(stack_settings.schema_registry())


def register(registry: SchemaRegistryClient, subject: str, schema: dict) -> int:
    return registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))


def jobs_file(tmp_path, topic: str, body: str) -> str:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"jobs:\n  {topic}:\n    topic: {topic}\n    format: avro\n    table: {topic}_orders\n{body}")
    return str(path)


def run_stream(spark, stack_settings, jobs: str, topic: str, checkpoint) -> tuple[int, str]:
    args = dict(job=topic, trigger="available-now", checkpoint=checkpoint)
    return run_here(jobs, lambda: stream.run(stream.StreamArgs.from_flags(**args), spark,
                                             stack_settings.kafka_client(), stack_settings.offsets_db_url,
                                             threading.Event()))


def test_two_writer_versions_land_in_one_table_and_an_unknown_schema_id_is_a_dead_letter(
        spark, stack_settings, bootstrap, db, registry, topic_name, tmp_path):
    v1, v2 = register(registry, f"{topic_name}-value", V1), register(registry, f"{topic_name}-value", V2)
    assert v1 != v2
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, [{"value": wire(v1, V1, {"id": f"a{i}", "amount": i})} for i in range(5)]
            + [{"value": wire(v2, V2, {"id": f"b{i}", "amount": i, "note": f"n{i}"})} for i in range(5)]
            + [{"value": wire(987_654, V1, {"id": "lost", "amount": 0})}, {"value": b"not avro at all"}])
    jobs = jobs_file(tmp_path, topic_name, "    schema_registry: {}\n    key: [id]\n")

    # the entry names no columns: `jobs check` shows those of the subject's latest version
    checked = subprocess.run([sys.executable, "-m", "streamfill.cli.main", "jobs", "check", jobs], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"columns from subject {topic_name}-value" in checked.stdout
    assert all(column in checked.stdout for column in ("amount", "note", "double precision"))

    code, out = run_stream(spark, stack_settings, jobs, topic_name, tmp_path / "ckpt")
    assert code == 0, out
    rows = query(db, f'SELECT id, amount, note FROM "{topic_name}_orders" ORDER BY "offset"')
    assert rows == [(f"a{i}", i, None) for i in range(5)] + [(f"b{i}", i, f"n{i}") for i in range(5)]
    dead = dict(query(db, 'SELECT d."offset", d.error FROM dead_letters d JOIN jobs j ON j.id = d.job_id '
                          "WHERE j.name = :j", j=topic_name))
    assert set(dead) == {10, 11}
    assert "schema id 987654 is unknown to the schema registry" in dead[10]
    assert "not in Confluent's wire format" in dead[11]


@pytest.mark.fault
def test_the_registry_stopped_mid_stream_fails_the_batch_and_the_restarted_stream_ends_exactly_once(
        spark, stack_settings, bootstrap, db, registry, topic_name, tmp_path):
    from streamfill.cli.stack.schema_registry import SchemaRegistry

    v1 = register(registry, f"{topic_name}-value", V1)
    create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, [{"value": wire(v1, V1, {"id": f"a{i}", "amount": i}), "partition": i % 2}
                                    for i in range(20)])
    jobs = jobs_file(tmp_path, topic_name, "    schema_registry: {}\n    columns:\n      id: {type: string, "
                                           "required: true}\n      amount: {type: double}\n")
    assert run_stream(spark, stack_settings, jobs, topic_name, tmp_path / "ckpt")[0] == 0
    v2 = register(registry, f"{topic_name}-value", V2)  # a new writer version the stream has not seen yet
    service = SchemaRegistry(stack_settings)
    service.stop()
    try:
        produce(bootstrap, topic_name, [{"value": wire(v2, V2, {"id": f"b{i}", "amount": i, "note": None}),
                                         "partition": i % 2} for i in range(20)])
        code, out = run_stream(spark, stack_settings, jobs, topic_name, tmp_path / "ckpt")
        assert code == 1 and "does not answer" in out, out[-3000:]
        # the failed batch committed nothing and dead-lettered nothing
        assert query(db, "SELECT sum(next_offset) FROM latest_offsets WHERE job = :j", j=topic_name) == [(20,)]
        assert query(db, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j",
                     j=topic_name) == [(0,)]
    finally:
        service.start()
    code, out = run_stream(spark, stack_settings, jobs, topic_name, tmp_path / "ckpt")
    assert code == 0, out
    for p in (0, 1):
        rows, distinct = query(db, f'SELECT count(*), count(DISTINCT "offset") FROM "{topic_name}_orders" '
                                   "WHERE partition = :p", p=p)[0]
        dead = query(db, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j "
                         "AND d.partition = :p", j=topic_name, p=p)[0][0]
        assert rows == distinct and rows + dead == 20, f"partition {p}: {rows} rows + {dead} dead letters != 20"
    assert query(db, f'SELECT count(*) FROM "{topic_name}_orders" WHERE id LIKE :b', b="b%") == [(20,)]


def test_from_connect_writes_out_the_columns_of_an_avro_connectors_value_subject(stack_settings, registry,
                                                                                topic_name, tmp_path):
    """`jobs from-connect --columns-from-registry`: a JDBC sink writing Avro through a registry becomes an entry
    with the value subject's latest version's columns written out; without the flag, one that follows the
    subject. No Spark: what the command reads is the registry."""
    import yaml
    from typer.testing import CliRunner

    from streamfill.cli.commands.jobs import app

    register(registry, f"{topic_name}-value", V2)
    config = tmp_path / "sink.json"
    config.write_text(json.dumps({"name": f"{topic_name}-sink", "config": {
        "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector", "topics": topic_name,
        "connection.url": "jdbc:postgresql://db.example:5432/shop", "insert.mode": "upsert", "pk.mode": "record_value",
        "pk.fields": "id", "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": stack_settings.schema_registry()["url"]}}))
    runner = CliRunner()
    written = runner.invoke(app, ["from-connect", str(config), "--columns-from-registry"])
    assert written.exit_code == 0, written.output
    entry = yaml.safe_load(written.output[written.output.index("# from Kafka Connect"):])["jobs"][f"{topic_name}-sink"]
    assert entry["columns"] == {"id": {"type": "string", "required": True}, "amount": {"type": "double",
                                                                                      "required": True},
                                "note": {"type": "string"}}
    assert (entry["format"], entry["key"], entry["mode"], entry["postgres_conn_id"]) == (
        "avro", ["id"], "replace", "postgres_shop")
    following = runner.invoke(app, ["from-connect", str(config)])
    assert following.exit_code == 0, following.output
    assert "columns:" not in following.output.split("jobs:")[1], "no flag: the entry follows the subject"
