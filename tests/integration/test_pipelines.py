"""Bring your own topic: pipelines of four shapes, each declared by one YAML entry, streamed and backfilled as
`streamfill stream` and `streamfill backfill` do (in the test run's SparkSession: this module is about what a
pipeline makes of records; tests/integration/test_jobs.py and test_faults.py launch the CLI). Each table is
compared, column by column, with what a bare consumer plus an independent Python decoding of the produced
records says it should hold, and the dead letters with the invalid records and their reasons (the generator
knows which rule each bad record breaks). Schema evolution, quality and `jobs check` go through the CLI."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import uuid
from datetime import datetime
from decimal import Decimal

import fastavro
import pytest
from sqlalchemy import text

from streamfill import REPO_ROOT
from streamfill.spark_jobs import backfill, stream
from tests.job_helpers import run_here
from tests.kafka_helpers import consume_all, create_topic, produce

# one worker runs the module, so its world (topics produced, streams run) is made once
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("pipelines")]

CLICK_SCHEMA = {"type": "record", "name": "Click", "fields": [
    {"name": "url", "type": "string"}, {"name": "ms", "type": "long"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
    {"name": "agent", "type": ["null", "string"], "default": None}]}


def query(db, sql: str, **params) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql), params)]


def cli(*args: str, jobs: str) -> tuple[int, str]:
    """One `streamfill` launch with `jobs` as the jobs file: its exit code and output."""
    done = subprocess.run([sys.executable, "-m", "streamfill.cli.main", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=900,
                          env={**os.environ, "STREAMFILL_JOBS_FILE": jobs, "COLUMNS": "250"})
    return done.returncode, done.stdout


def payment(i: int) -> dict:
    return {"payment_id": f"p-{i}", "amount": f"{i}.25", "currency": ["EUR", "USD", "GBP"][i % 3],
            "paid_at": f"2026-11-2{i % 9}T10:00:0{i % 10}Z", "card_last4": f"{1000 + i}"[-4:],
            "refunded": i % 2 == 0, "tags": [f"t{i}", "x"], "customer": {"id": 100 + i, "country": "DE"},
            "attempts": i % 5, "meta": "vip" if i % 3 == 0 else {"n": i, "flags": [True]}}


# the bad records and the reason each must get: column, rule and value (or why PostgreSQL cannot store it)
BAD_PAYMENTS = [
    (lambda p: {**p, "amount": "2500000"}, "amount above max 1000000: 2500000"),
    (lambda p: {**p, "amount": "-1"}, "amount below min 0: -1"),
    (lambda p: {k: v for k, v in p.items() if k != "paid_at"}, "missing field paid_at (required)"),
    (lambda p: {**p, "currency": "XXX"}, "currency not in [EUR, USD, GBP]: XXX"),
    (lambda p: {**p, "card_last4": "12a4"}, "card_last4 does not match pattern ^[0-9]{4}$: 12a4"),
    (lambda p: {**p, "refunded": "maybe"}, "refunded is not a boolean: maybe"),
    (lambda p: {**p, "payment_id": "a\u0000b"}, "payment_id contains a NUL character"),
    (lambda p: {**p, "attempts": 3_000_000_000}, "attempts out of range for int: 3000000000"),
    (lambda p: {**p, "amount": "1e30"}, "amount out of range for decimal(12,2)"),
    (lambda p: {**p, "customer": {"id": "x1", "country": "DE"}},
     'customer is not a struct<id:bigint,country:string>: {"id":"x1","country":"DE"}'),
]


@pytest.fixture(scope="module")
def world(stack_settings, bootstrap, spark, tmp_path_factory):
    """Four topics and the jobs file that declares their pipelines; records produced once for every test."""
    tag = uuid.uuid4().hex[:8]
    folder = tmp_path_factory.mktemp("pipelines")
    (folder / "click.avsc").write_text(json.dumps(CLICK_SCHEMA))
    names = {k: f"{k}_{tag}" for k in ("payments", "accounts", "clicks", "blobs")}
    lossy = f"lossy_{tag}"  # the payments topic without dead letters: read by a backfill only
    jobs = folder / "jobs.yaml"
    jobs.write_text(textwrap.dedent(f"""\
        jobs:
          {names['payments']}:
            topic: {names['payments']}
            columns:
              payment_id: {{type: string, required: true, max_length: 64}}
              amount:     {{type: "decimal(12,2)", required: true, min: 0, max: 1000000}}
              currency:   {{type: string, in: [EUR, USD, GBP]}}
              paid_at:    {{type: timestamp, required: true}}
              card_last4: {{type: string, pattern: "^[0-9]{{4}}$"}}
              refunded:   {{type: boolean}}
              tags:       {{type: "array<string>"}}
              customer:   {{type: "struct<id:bigint,country:string>"}}
              cust_id:    {{type: bigint, field: customer.id}}
              attempts:   {{type: int}}
              meta:       {{type: json}}
            derived:
              amount_eur: "CASE WHEN currency = 'EUR' THEN amount END"
            table: {names['payments']}
            quality:
              - expect_column_values_to_be_unique: {{column: payment_id}}
          {names['accounts']}:
            topic: {names['accounts']}
            columns:
              account_id: {{type: string, required: true}}
              balance:    {{type: "decimal(12,2)"}}
              version:    {{type: int}}
            table: {names['accounts']}
            key: [account_id]
            mode: replace
          {names['clicks']}:
            topic: {names['clicks']}
            format: avro
            avro_schema: click.avsc
            columns:
              url:   {{type: string, required: true}}
              ms:    {{type: bigint, min: 0}}
              price: {{type: "decimal(8,2)"}}
              agent: {{type: string}}
            table: {names['clicks']}
          {names['blobs']}:
            topic: {names['blobs']}
            format: raw
            table: {names['blobs']}
          {lossy}:
            topic: {names['payments']}
            columns:
              payment_id: {{type: string, required: true, max_length: 64}}
              amount:     {{type: "decimal(12,2)", required: true, min: 0, max: 1000000}}
            table: {lossy}
            dead_letters: false
        """))
    create_topic(bootstrap, names["payments"], 2)
    payments, expected_dead = [], {}
    for i in range(300):
        p = payment(i)
        if i % 30 == 7:
            make, reason = BAD_PAYMENTS[(i // 30) % len(BAD_PAYMENTS)]
            value = json.dumps(make(p)).encode()
            expected_dead[value] = reason
        else:
            value = json.dumps(p).encode()
        payments.append({"value": value, "partition": i % 2})
    invalid_utf8 = b'{"payment_id": "\xff\xfe", "amount": "1"}'
    payments.append({"value": invalid_utf8, "partition": 0})
    expected_dead[invalid_utf8] = "value is not valid UTF-8"
    produce(bootstrap, names["payments"], payments)

    create_topic(bootstrap, names["accounts"], 2)
    accounts = []
    for version in range(1, 4):  # three versions of each account, each key always in one partition
        for a in range(20):
            accounts.append({"key": f"a{a}".encode(), "partition": a % 2, "value": json.dumps(
                {"account_id": f"a{a}", "balance": f"{a * 10 + version}.50", "version": version}).encode()})
    produce(bootstrap, names["accounts"], accounts)

    create_topic(bootstrap, names["clicks"], 1)
    parsed = fastavro.parse_schema(CLICK_SCHEMA)
    clicks = []
    for i in range(50):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"url": f"/p/{i}", "ms": i * 1000, "price": Decimal(f"{i}.99"),
                                                 "agent": None if i % 2 else "curl"})
        clicks.append({"value": buf.getvalue()})
    clicks.insert(25, {"value": b"\x07not avro"})
    produce(bootstrap, names["clicks"], clicks)

    create_topic(bootstrap, names["blobs"], 1)
    blobs = [{"key": f"k{i}".encode(), "value": bytes([i, 0, 255]), "headers": [("h", f"v{i}".encode())]}
             for i in range(20)]
    produce(bootstrap, names["blobs"], blobs)
    runs = {key: run_here(jobs, lambda name=name: stream.run(
                stream.StreamArgs.from_flags(job=name, trigger="available-now", max_offsets_per_trigger=100,
                                             checkpoint=folder / f"ckpt-{name}"),
                spark, stack_settings.kafka_client(), stack_settings.offsets_db_url, threading.Event()))
            for key, name in names.items()}
    return {"names": names, "jobs": str(jobs), "folder": folder, "expected_dead": expected_dead, "runs": runs,
            "lossy": lossy}


@pytest.fixture(scope="module")
def backfills(world, spark, stack_settings):
    """After the streams: a backfill of each entry into a table of its own (a replay of an older range into an
    upsert table is tests/integration/test_table_changes.py's, with deletes)."""
    names = world["names"]
    flags = {key: {"job": names[key], "from_": "earliest", "to": "latest", "table": f"{names[key]}_again"}
             for key in ("payments", "clicks", "blobs")}
    flags["lossy"] = {"job": world["lossy"], "from_": "earliest", "to": "latest"}
    return {key: run_here(world["jobs"], lambda given=given: backfill.run(
                backfill.BackfillArgs.from_flags(**given), spark, stack_settings.kafka_client(),
                stack_settings.offsets_db_url))
            for key, given in flags.items()}


def dead_letters(db, job: str) -> dict[bytes, str]:
    return {bytes(v): e for v, e in query(db, "SELECT d.raw_value, d.error FROM dead_letters d JOIN jobs j ON "
                                              "j.id = d.job_id WHERE j.name = :j", j=job)}


def expected_payments(bootstrap: str, topic: str, expected_dead: dict) -> dict[tuple[int, int], dict]:
    """The independent decoding: a bare consumer's records, read with json and typed by hand."""
    out = {}
    for m in consume_all(bootstrap, topic, 2):
        if m.value() in expected_dead:
            continue
        p = json.loads(m.value())
        out[(m.partition(), m.offset())] = {
            "payment_id": p["payment_id"], "amount": Decimal(p["amount"]), "currency": p["currency"],
            "paid_at": datetime.fromisoformat(p["paid_at"].replace("Z", "+00:00")), "card_last4": p["card_last4"],
            "refunded": p["refunded"], "tags": p["tags"], "customer": p["customer"], "cust_id": p["customer"]["id"],
            "attempts": p["attempts"], "meta": p["meta"],
            "amount_eur": Decimal(p["amount"]) if p["currency"] == "EUR" else None}
    return out


PAYMENT_COLUMNS = ("payment_id", "amount", "currency", "paid_at", "card_last4", "refunded", "tags", "customer",
                   "cust_id", "attempts", "meta", "amount_eur")


def table_rows(db, table: str, columns: tuple[str, ...]) -> dict[tuple[int, int], dict]:
    cols = ", ".join(f'"{c}"' for c in columns)
    return {(r[0], r[1]): dict(zip(columns, r[2:])) for r in
            query(db, f'SELECT partition, "offset", {cols} FROM "{table}"')}


def test_a_json_pipeline_types_nested_columns_and_dead_letters_each_rule_by_name(world, db, bootstrap):
    name = world["names"]["payments"]
    code, out = world["runs"]["payments"]
    assert code == 0, out[-3000:]
    assert table_rows(db, name, PAYMENT_COLUMNS) == expected_payments(bootstrap, name, world["expected_dead"])
    dead = dead_letters(db, name)
    assert set(dead) == set(world["expected_dead"]), "every bad record is a dead letter, and only those"
    wrong = {v: e for v, e in dead.items() if not e.startswith(world["expected_dead"][v])}
    assert wrong == {}, "each reason names the column, the rule and the value"
    types = dict(query(db, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = :t",
                       t=name))
    assert types["amount"] == "numeric" and types["paid_at"] == "timestamp with time zone"
    assert types["tags"] == types["customer"] == types["meta"] == "jsonb" and types["attempts"] == "integer"


def test_a_backfill_of_the_entry_gives_the_same_rows_and_dead_letters(world, backfills, db):
    name = world["names"]["payments"]
    code, out = backfills["payments"]
    assert code == 0, out[-3000:]
    assert table_rows(db, f"{name}_again", PAYMENT_COLUMNS) == table_rows(db, name, PAYMENT_COLUMNS)
    backfill_job = query(db, "SELECT name FROM jobs WHERE name LIKE :j", j=f"{name}.backfill.%")[0][0]
    assert dead_letters(db, backfill_job) == dead_letters(db, name)


def test_an_upsert_pipeline_keeps_the_latest_version_of_each_key(world, db):
    name = world["names"]["accounts"]
    code, out = world["runs"]["accounts"]
    assert code == 0, out[-3000:]
    rows = query(db, f'SELECT account_id, balance, version FROM "{name}" ORDER BY account_id')
    assert sorted(rows) == sorted((f"a{a}", Decimal(f"{a * 10 + 3}.50"), 3) for a in range(20))
    code, out = cli("quality", "--job", name, jobs=world["jobs"])
    assert code == 0 and "FAIL" not in out, out[-3000:]


def test_an_avro_pipeline_decodes_the_schema_file_and_dead_letters_what_does_not_decode(world, backfills, db):
    name = world["names"]["clicks"]
    code, out = world["runs"]["clicks"]
    assert code == 0, out[-3000:]
    rows = sorted(query(db, f'SELECT url, ms, price, agent FROM "{name}"'), key=lambda r: r[1])
    assert rows == [(f"/p/{i}", i * 1000, Decimal(f"{i}.99"), None if i % 2 else "curl") for i in range(50)]
    dead = dead_letters(db, name)
    assert list(dead) == [b"\x07not avro"] and next(iter(dead.values())).startswith("value is not Avro")
    code, out = backfills["clicks"]
    assert code == 0, out[-3000:]
    assert sorted(query(db, f'SELECT url, ms, price, agent FROM "{name}_again"'), key=lambda r: r[1]) == rows


def test_a_raw_pipeline_keeps_key_value_and_headers(world, backfills, db):
    name = world["names"]["blobs"]
    code, out = world["runs"]["blobs"]
    assert code == 0, out[-3000:]
    rows = query(db, f'SELECT key, value, headers FROM "{name}" ORDER BY "offset"')
    assert [(bytes(k), bytes(v)) for k, v, _ in rows] == [(f"k{i}".encode(), bytes([i, 0, 255])) for i in range(20)]
    assert rows[3][2] == [{"key": "h", "value": b"v3".hex()}]
    code, out = backfills["blobs"]
    assert code == 0, out[-3000:]
    assert query(db, f'SELECT key, value, headers FROM "{name}_again" ORDER BY "offset"') == rows


def test_every_stream_ends_with_rows_plus_dead_letters_equal_to_offsets(world, db, bootstrap):
    for key in ("payments", "clicks", "blobs"):
        name = world["names"][key]
        landed = query(db, f'SELECT partition, count(*) FROM "{name}" GROUP BY 1')
        dead = query(db, "SELECT d.partition, count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id "
                         "WHERE j.name = :j GROUP BY 1", j=name)
        total: dict[int, int] = {}
        for p, n in landed + dead:
            total[p] = total.get(p, 0) + n
        consumed = {p: n for p, n in query(db, "SELECT partition, sum(end_offset - start_offset) FROM offset_history "
                                               "WHERE job = :j AND committed GROUP BY 1", j=name)}
        assert total == consumed, f"{key}: rows + dead letters per partition {total} != offsets {consumed}"


def test_schema_evolution_adds_a_column_and_refuses_a_changed_type_before_reading(world, db, bootstrap, spark,
                                                                                   stack_settings):
    name = world["names"]["accounts"]
    jobs = world["folder"] / "evolve.yaml"
    entry = textwrap.dedent(f"""\
        jobs:
          {name}:
            topic: {name}
            columns:
              account_id: {{type: string, required: true}}
              balance:    {{type: "decimal(12,2)"}}
              version:    {{type: int}}
              owner:      {{type: string}}
            table: {name}
            key: [account_id]
            mode: replace
        """)
    jobs.write_text(entry)
    produce(bootstrap, name, [{"key": b"a1", "partition": 1, "value": json.dumps(
        {"account_id": "a1", "balance": "9.50", "version": 4, "owner": "ann"}).encode()}])

    def evolve() -> tuple[int, str]:
        args = dict(job=name, trigger="available-now", checkpoint=world["folder"] / f"ckpt-{name}")
        return run_here(str(jobs), lambda: stream.run(stream.StreamArgs.from_flags(**args), spark,
                                                      stack_settings.kafka_client(), stack_settings.offsets_db_url,
                                                      threading.Event()))

    code, out = evolve()
    assert code == 0, out[-3000:]
    assert query(db, f'SELECT account_id, owner FROM "{name}" WHERE owner IS NOT NULL') == [("a1", "ann")]
    assert query(db, f'SELECT count(*) FROM "{name}" WHERE owner IS NULL') == [(19,)]
    jobs.write_text(entry.replace('balance:    {type: "decimal(12,2)"}', "balance:    {type: double}"))
    before = query(db, "SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j", j=name)
    code, out = evolve()
    flat = " ".join(out.split())
    assert code == 1 and "has column balance of type numeric(12,2), but it is written as double precision" in flat
    assert "ALTER TABLE" in flat
    assert query(db, "SELECT count(*) FROM batches b JOIN jobs j ON j.id = b.job_id WHERE j.name = :j",
                 j=name) == before, "refused before anything was planned or read"


def test_without_dead_letters_invalid_records_are_kept_nowhere_and_quality_still_passes(world, backfills, db):
    name = world["lossy"]
    code, out = backfills["lossy"]
    assert code == 0, out[-3000:]
    # rows for the records valid under this entry's two columns: the payments topic minus the records that break
    # one of them (not JSON, or a rule of payment_id or amount); none of them is a dead letter
    broken = {v for v, reason in world["expected_dead"].items()
              if reason.split(" ")[0] in ("amount", "payment_id", "value")}
    assert query(db, f'SELECT count(*) FROM "{name}"') == [(301 - len(broken),)]
    job = query(db, "SELECT name FROM jobs WHERE name LIKE :j", j=f"{name}.backfill.%")[0][0]
    assert query(db, "SELECT count(*) FROM dead_letters d JOIN jobs j ON j.id = d.job_id WHERE j.name = :j",
                 j=job) == [(0,)]
    code, out = cli("quality", "--job", job, "--pipeline", name, "--table", name, jobs=world["jobs"])
    assert code == 0 and "FAIL" not in out, out[-3000:]
    assert "PASS rows landed + dead letters <= offsets consumed" in out, out[-3000:]


def test_streamfill_jobs_check_prints_the_table_each_entry_creates(world):
    code, out = cli("jobs", "check", world["jobs"], jobs=world["jobs"])
    assert code == 0, out
    assert "numeric(12,2)" in out and "required, min 0, max 1000000" in out and "5 job(s) valid" in out
    code, out = cli("jobs", "list", jobs=world["jobs"])
    assert code == 0 and all(name in out for name in world["names"].values()), out


@pytest.mark.parametrize("sql, reason", [("n +* FROM", "INVALID_USAGE_OF_STAR_OR_REGEX"),
                                         ("nope + 1", "UNRESOLVED_COLUMN")])
def test_a_derived_expression_spark_cannot_resolve_is_refused_naming_the_entry_and_column(spark, sql, reason):
    from streamfill.errors import OptionError
    from streamfill.spark_jobs.pipelines.compile import parse
    from streamfill.spark_jobs.pipelines.spec import PipelineSpec

    kafka = spark.createDataFrame([], "key binary, value binary, topic string, partition int, offset long, "
                                      "timestamp timestamp, timestampType int")
    spec = PipelineSpec.model_validate({"name": "x", "topic": "t", "table": "t", "columns": {"n": {"type": "bigint"}},
                                        "derived": {"ok": "n * 2", "z": sql}})
    with pytest.raises(OptionError, match=rf"derived\.z='{re.escape(sql)}': in entry 'x' is not a Spark SQL "
                                          rf"expression over the entry's columns \(n\): \[{reason}"):
        parse(kafka, spec)
