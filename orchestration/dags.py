"""Every streamfill DAG, generated from the pipeline entries of the jobs file and the jobs.d/*.yaml beside it
(adding a pipeline is one YAML entry). A DAG file calls `build()` (dags/streamfill_dags.py in the checkout; in an
Airflow that installed the wheel, the same two lines in its DAG folder); the jobs file is the Airflow Variable
streamfill_jobs_file, else STREAMFILL_JOBS_FILE, else the checkout's dags/streamfill_jobs.yaml.

Per job J:
- streamfill_stream__J: launches the long-running stream with spark-submit; when it dies, the task's retries
  restart it and it resumes from its checkpoint or offsets_db. Manual (trigger it once); Param `trigger` lets
  a run stop when caught up (`available-now`).
- streamfill_stream_health__J: every few minutes, fails when the last commit is too old or the lag too large.
- streamfill_interval__J: one run per schedule interval [data_interval_start, data_interval_end): the offsets
  between offsets-for-times of the two instants, in replace mode, then the quality suite on that window, then
  one asset event of the windows' table (orchestration/assets.py) keyed by the window's start, with what the
  window committed in its extra (a re-run emits again, marked `rerun`). Airflow's own backfill (`airflow
  backfill create` or the UI) reprocesses any window; re-running is idempotent.
- streamfill_quality__J: the quality suite on the stream's table, with freshness, on a schedule.
- streamfill_announce__J: scheduled on the stream's table asset, so Airflow's triggerer runs the asset's
  watcher, which announces the commits of every job writing the table as asset events keyed `commits:<job>:<n>`
  (orchestration/announce.py). Pausing every DAG scheduled on the table stops the announcements; commits made
  meanwhile are announced when one is unpaused.
And streamfill_replay: a form (Params validated by JSON schema) launching a bounded backfill, then quality;
streamfill_maintenance: daily, `streamfill db prune --apply` (history older than the STREAMFILL_RETAIN_* ages).

Scheduled DAGs but the maintenance DAG start paused: unpause those you want running (a backfill's runs of a
paused DAG stay queued).
Nothing here names a host or a credential: they come from the Airflow connections streamfill_postgres and
streamfill_kafka and the variables streamfill_spark_master
and streamfill_jobs_file.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, CronDataIntervalTimetable, Param, get_current_context, task

from streamfill.connectors.postgres.sink_options import APPEND_NEW, MODES, REPLACE
from streamfill.names import window_job
from streamfill.orchestration import assets, dag_ids
from streamfill.orchestration.jobs_file_variable import pin
from streamfill.spark_jobs.backfill_plan import DEFAULT_CHUNK
from streamfill.spark_jobs.pipelines import PipelineSpec, load

SPEC_PATTERN = r"^(earliest|latest|\{.*\}|\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?)$"
TAGS = ["streamfill"]
# the entries the DAGs of this process were built from: a task looks its job up here, in the process that parsed
# the DAG file to run it
JOBS: dict[str, PipelineSpec] = {}


@task
def run_stream(job: str) -> None:
    from streamfill.durations import stop_grace_seconds
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.form_checks import refuse_unknown_conf
    from streamfill.orchestration.spark_submit import retry_wait, spark_submit
    from streamfill.spark_jobs.job_flags import argv
    from streamfill.spark_jobs.stream_args import StreamArgs

    spec, ctx = JOBS[job], get_current_context()
    refuse_unknown_conf(ctx["dag"].dag_id, ctx["dag_run"].conf or {}, ctx["dag"].params)
    trigger = ctx["params"]["trigger"] or spec.trigger
    # a retry waits for a launch of the job still stopping: it holds the job while it commits its batch in flight
    wait = retry_wait(stop_grace_seconds(spec.stop_grace, "stop_grace"))
    spark_submit("stream.py", argv(StreamArgs, job=spec.name, trigger=trigger, wait_for_job=wait), endpoints(),
                 graceful=True)


@task
def check_health(job: str) -> None:
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.stream_health import health

    spec, ends = JOBS[job], endpoints()
    found = health(ends.db_url, spec.name, timedelta(minutes=spec.health.max_commit_age_minutes),
                   spec.health.max_lag, ends.kafka)
    print(f"job {spec.name}: last commit {found.last_commit}, worst partition lag {found.max_lag}"
          + ("; at the log end of every partition (nothing to read)" if found.caught_up else ""))
    if found.problems:
        raise RuntimeError("; ".join(found.problems))


@task
def backfill_window(job: str) -> str:
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.spark_submit import RETRY_WAIT, spark_submit
    from streamfill.orchestration.window_event import iso
    from streamfill.spark_jobs.backfill_args import BackfillArgs
    from streamfill.spark_jobs.job_flags import argv

    spec, ctx = JOBS[job], get_current_context()
    start, end = ctx["data_interval_start"], ctx["data_interval_end"]
    name = window_job(spec.name, start)
    spark_submit("backfill.py", argv(BackfillArgs, job=name, pipeline=spec.name, topic=spec.topic, from_=iso(start),
                                     to=iso(end), table=spec.interval_target, mode=REPLACE, wait_for_job=RETRY_WAIT),
                 endpoints())
    return name


@task
def announce_window(job: str, window_job: str) -> None:
    """The window's asset event: its start as the partition key, what it committed in the extra (the task's
    outlet is the windows' table)."""
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.window_event import window_event

    ctx = get_current_context()
    key, extra = window_event(endpoints().db_url, job, window_job, ctx["data_interval_start"],
                              ctx["data_interval_end"])
    event = ctx["outlet_events"][ctx["task"].outlets[0]]
    event.extra = extra
    event.add_partitions(key)
    body = extra["streamfill"]
    print(f"asset event {key} of {ctx['task'].outlets[0].uri}: {body['rows']:,} rows, {body['dead_letters']:,} "
          f"dead letters, pass {body['pass']}{' (a re-run)' if body['rerun'] else ''}", flush=True)


@task
def note_unkeyed_event() -> None:
    ctx = get_current_context()
    for asset, events in ctx["triggering_asset_events"].items():
        print(f"{len(events)} event(s) of {asset.uri} without a partition key; streamfill's announcements carry "
              "one (commits:<job>:<n>) and go to partitioned consumers", flush=True)


@task
def validate_replay() -> dict:
    """Checks the form before Spark starts: that its user may replay the entry into the table
    (orchestration/replay_access.py), then against the broker and offsets_db (from after to, unknown
    partitions, times in the future, ranges below the log start)."""
    from streamfill.connectors.kafka.broker import Broker
    from streamfill.errors import OptionError
    from streamfill.offsets_db.store import OffsetStore
    from streamfill.orchestration import replay_access
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.form_checks import as_form_error, refuse_unknown_conf
    from streamfill.orchestration.job_names import replay_job
    from streamfill.spark_jobs.backfill_args import BackfillArgs
    from streamfill.spark_jobs.backfill_prepare import check_job, resolve

    ctx = get_current_context()
    params = ctx["params"]
    refuse_unknown_conf(ctx["dag"].dag_id, ctx["dag_run"].conf or {}, ctx["dag"].params)
    spec = JOBS[params["job"]]
    table = params["table"] or replay_access.default_table(spec)
    replay_access.require(ctx["dag_run"], spec, table)
    ends = endpoints()
    try:
        job = replay_job(spec.name, params["from"], params["to"], table)
        args = BackfillArgs(job=job, topic=spec.topic, from_=params["from"], to=params["to"], table=table,
                            mode=params["mode"], chunk_size=params["chunk_size"], pipeline=spec.name)
        check_job(args, OffsetStore(ends.db_url))
        window = resolve(args, Broker(ends.kafka))
    except OptionError as exc:
        raise as_form_error(exc) from None
    print(f"replay {args.job}: {window.total:,} offsets of {spec.topic} into {table} ({args.mode})")
    return {"job": args.job, "topic": spec.topic, "from": args.from_, "to": args.to, "table": table,
            "mode": args.mode, "chunk_size": args.chunk_size, "pipeline": spec.name}


@task
def run_replay(plan: dict) -> str:
    from streamfill.orchestration import replay_access
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.job_names import replay_job
    from streamfill.orchestration.spark_submit import RETRY_WAIT, spark_submit
    from streamfill.spark_jobs.backfill_args import BackfillArgs
    from streamfill.spark_jobs.job_flags import argv

    # the plan as it is launched, however it reached this task (a cleared task reads it from XCom again): its
    # topic and job are the entry's and the form's again, never whatever the plan says
    spec = JOBS[plan["pipeline"]]
    replay_access.require(get_current_context()["dag_run"], spec, plan["table"])
    plan = {**plan, "topic": spec.topic, "job": replay_job(spec.name, plan["from"], plan["to"], plan["table"])}
    spark_submit("backfill.py", argv(BackfillArgs, job=plan["job"], topic=plan["topic"], from_=plan["from"],
                                     to=plan["to"], table=plan["table"], mode=plan["mode"],
                                     chunk_size=plan["chunk_size"], pipeline=plan["pipeline"],
                                     wait_for_job=RETRY_WAIT), endpoints())
    return plan["job"]


@task
def quality(checked_job: str, table: str, pipeline: str, whole_table: bool = False,
            fresh_minutes: int | None = None) -> None:
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.task_lineage import lineage_parent
    from streamfill.spark_jobs import quality as q

    ends = endpoints()
    outcome = q.validate(ends.db_url, table, checked_job, pipeline=pipeline, whole_table=whole_table,
                         freshness=timedelta(minutes=fresh_minutes) if fresh_minutes else None,
                         schema_registry=ends.schema_registry or None, parent=lineage_parent())
    q.require(outcome)


def build() -> dict[str, DAG]:
    """Every DAG of the jobs file, by dag_id. Call it while Airflow imports a DAG file: the DAGs then belong to
    that file (Airflow records the file it was importing), wherever this module is installed."""
    JOBS.clear()
    JOBS.update(load(pin()))
    one_topic = [name for name, spec in JOBS.items() if spec.windowed]
    tables = assets.of_entries(JOBS.values(), assets.database_url())
    dags = [_entry_dags(spec, tables[spec.name]) for spec in JOBS.values()]
    return {d.dag_id: d for d in [*(d for entry in dags for d in entry), _replay(one_topic), _maintenance()]}


def _entry_dags(spec: PipelineSpec, tables: assets.EntryAssets) -> list[DAG]:
    out = []
    with DAG(dag_id=dag_ids.stream(spec.name), schedule=None, catchup=False, max_active_runs=1,
             tags=TAGS, doc_md=__doc__,
             params={"trigger": Param(None, type=["null", "string"], pattern=r"^(available-now|\d+(ms|s|m))$",
                                      description=f"empty: the job's trigger ({spec.trigger}); available-now "
                                                  "stops when caught up")},
             default_args={"retries": 20, "retry_delay": timedelta(seconds=15)}) as dag:
        run_stream(spec.name)
    out.append(dag)

    with DAG(dag_id=dag_ids.stream_health(spec.name), catchup=False, max_active_runs=1, tags=TAGS,
             schedule=CronDataIntervalTimetable(f"*/{spec.health.every_minutes} * * * *", timezone="UTC"),
             is_paused_upon_creation="health" not in spec.model_fields_set) as dag:  # runs once asked for
        check_health(spec.name)
    out.append(dag)

    if spec.windowed:  # windows and replays read one topic into one table
        with DAG(dag_id=dag_ids.interval(spec.name), catchup=False, max_active_runs=4, tags=TAGS,
                 schedule=CronDataIntervalTimetable(spec.schedule, timezone="UTC"), is_paused_upon_creation=True,
                 default_args={"retries": 2, "retry_delay": timedelta(seconds=30)}) as dag:
            window = backfill_window(spec.name)
            checked = quality(window, spec.interval_target, spec.name)
            checked >> announce_window.override(outlets=[tables.windows])(spec.name, window)
        out.append(dag)

    # Airflow's triggerer runs an asset's watcher while an unpaused DAG schedules on the asset: this one keeps
    # the stream's announcer running. Its runs come only from unkeyed events (another tool's); announcements
    # are keyed and go to partitioned consumers
    with DAG(dag_id=dag_ids.announce(spec.name), schedule=[tables.stream], catchup=False, tags=TAGS,
             is_paused_upon_creation=False, doc_md=__doc__) as dag:
        note_unkeyed_event()
    out.append(dag)

    with DAG(dag_id=dag_ids.quality(spec.name), catchup=False, max_active_runs=1, tags=TAGS,
             schedule=CronDataIntervalTimetable(spec.quality_schedule, timezone="UTC"),
             is_paused_upon_creation=True) as dag:
        quality(spec.name, spec.table, spec.name, whole_table=True,
                fresh_minutes=spec.health.max_commit_age_minutes)
    out.append(dag)
    return out


@task
def prune_history() -> None:
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.settings import get_settings
    from streamfill.spark_jobs.maintenance import prune

    apply = bool(get_current_context()["params"]["apply"])
    pruned = prune(endpoints().db_url, get_settings().retention(), apply=apply,
                   progress=lambda line: print(line, flush=True))
    print("\n".join(pruned.lines()), flush=True)


def _maintenance() -> DAG:
    with DAG(dag_id=dag_ids.MAINTENANCE, schedule=CronDataIntervalTimetable("17 3 * * *", timezone="UTC"),
             catchup=False, max_active_runs=1, tags=TAGS, doc_md=__doc__, is_paused_upon_creation=False,
             params={"apply": Param(True, type="boolean",
                                    description="off: a dry run that only logs what would be removed")}) as dag:
        prune_history()
    return dag


def _replay(one_topic: list[str]) -> DAG:
    with DAG(dag_id=dag_ids.REPLAY, schedule=None, catchup=False, max_active_runs=1, tags=TAGS, doc_md=__doc__,
             params={
                 "job": Param(one_topic[0] if one_topic else None, enum=one_topic,
                              description="the pipeline entry whose topic to replay"),
                 "from": Param("earliest", type="string", pattern=SPEC_PATTERN,
                               description="earliest, latest, per-partition JSON or an ISO-8601 time"),
                 "to": Param("latest", type="string", pattern=SPEC_PATTERN,
                             description="earliest, latest, per-partition JSON or an ISO-8601 time"),
                 "mode": Param(APPEND_NEW, enum=list(MODES),
                               description="append-new keeps existing rows, replace upserts them"),
                 "table": Param(None, type=["null", "string"], pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$",
                                description="target table; empty: <job table>_replay"),
                 "chunk_size": Param(DEFAULT_CHUNK, type="integer", minimum=1,
                                     description="offsets per exactly-once chunk"),
             }) as dag:
        plan = validate_replay()
        replayed = run_replay(plan)
        quality(replayed, plan["table"], plan["pipeline"])
    return dag
