"""Every streamfill DAG, generated from the pipeline entries of the jobs file and the jobs.d/*.yaml beside it
(adding a pipeline is one YAML entry). A DAG file calls `build()` (dags/streamfill_dags.py in the checkout; in an
Airflow that installed the wheel, the same two lines in its DAG folder); the jobs file is the Airflow Variable
streamfill_jobs_file, else STREAMFILL_JOBS_FILE, else the checkout's dags/streamfill_jobs.yaml.

Per job J:
- streamfill_stream__J: launches the long-running stream: on the Spark Connect server of J's spark_conn_id, the
  task then deferred to its supervision on the triggerer, which starts it again when it dies; otherwise with
  spark-submit beside the task, whose retries restart it. It resumes from offsets_db either way. Manual (trigger
  it once); Param `trigger` lets a run stop when caught up (`available-now`, beside the task).
- streamfill_stream_health__J: every few minutes, fails when the last commit is too old or the lag too large.
- streamfill_interval__J: one run per schedule interval [data_interval_start, data_interval_end): the offsets
  between offsets-for-times of the two instants, in replace mode, then the quality suite on that window, then
  one asset event of the windows' table (orchestration/assets.py) keyed by the window's start, with what the
  window committed in its extra (a re-run emits again, marked `rerun`). Airflow's own backfill (`airflow
  backfill create` or the UI) reprocesses any window; re-running is idempotent.
- streamfill_quality__J: the quality suite on the stream's table, with freshness, on a schedule.
- streamfill_announce__J: continuous, one run at a time: each run waits on the triggerer until J's commits are
  due to be announced, then hands Airflow one asset event of the stream's table keyed `commits:<job>:<n>` as its
  task's outlet event (orchestration/announce_operator.py, announce.py). Pausing it stops J's announcements;
  commits made meanwhile are announced when it is unpaused.
And streamfill_replay: a form (Params validated by JSON schema) launching a bounded backfill, then quality;
streamfill_maintenance: daily, `streamfill db prune --apply` (history older than the STREAMFILL_RETAIN_* ages).

Scheduled DAGs but the maintenance DAG start paused: unpause those you want running (a backfill's runs of a
paused DAG stay queued).
Nothing here names a host or a credential: they come from the Airflow connections streamfill_postgres and
streamfill_kafka (or those an entry names: kafka_conn_id, postgres_conn_id, schema_registry_conn_id,
spark_conn_id) and the variables streamfill_spark_master and streamfill_jobs_file.

The tasks are streamfill's operators (orchestration/stream_operator.py, backfill_operator.py,
quality_operator.py, announce_operator.py), so a DAG written by hand can do what these do; a refusal fails a task
without retries, an outage is retried (orchestration/failures.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG, CronDataIntervalTimetable, Param, get_current_context, task

from streamfill import dag_ids
from streamfill.connectors.postgres.sink_options import APPEND_NEW, MODES
from streamfill.orchestration import assets
from streamfill.orchestration.announce_operator import StreamfillAnnounceOperator
from streamfill.orchestration.backfill_operator import StreamfillBackfillOperator
from streamfill.orchestration.broken_entries import usable
from streamfill.orchestration.endpoints import ConnIds
from streamfill.orchestration.failures import classed
from streamfill.orchestration.quality_operator import StreamfillQualityOperator
from streamfill.orchestration.stream_operator import StreamfillStreamOperator
from streamfill.spark_jobs.backfill_plan import DEFAULT_CHUNK
from streamfill.spark_jobs.pipelines import PipelineSpec

SPEC_PATTERN = r"^(earliest|latest|\{.*\}|\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?)$"
TAGS = ["streamfill"]
CONTINUOUS_SINCE = datetime(2025, 1, 1, tzinfo=timezone.utc)  # any past instant: a continuous DAG starts now
# the entries the DAGs of this process were built from: a task looks its job up here, in the process that parsed
# the DAG file to run it
JOBS: dict[str, PipelineSpec] = {}


@task
def check_health(job: str) -> None:
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.stream_health import health

    spec = JOBS[job]
    with classed():
        ends = endpoints(ConnIds.of(spec))
        found = health(ends.db_url, spec.name, timedelta(minutes=spec.health.max_commit_age_minutes),
                       spec.health.max_lag, ends.kafka)
    print(f"job {spec.name}: last commit {found.last_commit}, worst partition lag {found.max_lag}"
          + ("; at the log end of every partition (nothing to read)" if found.caught_up else ""))
    if found.problems:
        raise RuntimeError("; ".join(found.problems))


@task
def announce_window(job: str, window_job: str) -> None:
    """The window's asset event: its start as the partition key, what it committed in the extra (the task's
    outlet is the windows' table)."""
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.window_event import window_event

    ctx = get_current_context()
    with classed():
        key, extra = window_event(endpoints(ConnIds.of(JOBS[job])).db_url, job, window_job,
                                  ctx["data_interval_start"], ctx["data_interval_end"])
    event = ctx["outlet_events"][ctx["task"].outlets[0]]
    event.extra = extra
    event.add_partitions(key)
    body = extra["streamfill"]
    print(f"asset event {key} of {ctx['task'].outlets[0].uri}: {body['rows']:,} rows, {body['dead_letters']:,} "
          f"dead letters, pass {body['pass']}{' (a re-run)' if body['rerun'] else ''}", flush=True)


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
    with classed():
        refuse_unknown_conf(ctx["dag"].dag_id, ctx["dag_run"].conf or {}, ctx["dag"].params)
        spec = JOBS[params["job"]]
        table = params["table"] or replay_access.default_table(spec)
        replay_access.require(ctx["dag_run"], spec, table)
        ends = endpoints(ConnIds.of(spec))
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
    from streamfill.orchestration.backfill_operator import launch_backfill
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.job_names import replay_job
    from streamfill.orchestration.spark_submit import RETRY_WAIT
    from streamfill.spark_jobs.backfill_args import BackfillArgs

    # the plan as it is launched, however it reached this task (a cleared task reads it from XCom again): its
    # topic and job are the entry's and the form's again, never whatever the plan says
    spec = JOBS[plan["pipeline"]]
    with classed():
        replay_access.require(get_current_context()["dag_run"], spec, plan["table"])
        args = BackfillArgs(job=replay_job(spec.name, plan["from"], plan["to"], plan["table"]), topic=spec.topic,
                            from_=plan["from"], to=plan["to"], table=plan["table"], mode=plan["mode"],
                            chunk_size=plan["chunk_size"], pipeline=spec.name, wait_for_job=RETRY_WAIT)
        launch_backfill(args, endpoints(ConnIds.of(spec)), spec.spark)
    return args.job


@task
def quality(checked_job: str, table: str, pipeline: str) -> None:
    """The replay's check: its entry and table come from the form's plan."""
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.orchestration.quality_operator import check_quality

    spec = JOBS[pipeline]
    with classed():
        ends = endpoints(ConnIds.of(spec))
    check_quality(spec, ends, checked_job, table)


def build() -> dict[str, DAG]:
    """Every DAG of the jobs file, by dag_id. Call it while Airflow imports a DAG file: the DAGs then belong to
    that file (Airflow records the file it was importing), wherever this module is installed. A broken entry has
    none: it is dags/streamfill_broken_entries.py's import error (orchestration/broken_entries.py)."""
    JOBS.clear()
    JOBS.update(usable())
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
        StreamfillStreamOperator(task_id="run_stream", entry=spec.name, spec=spec, check_conf=True,
                                 trigger="{{ params.trigger or '' }}")
    out.append(dag)

    with DAG(dag_id=dag_ids.stream_health(spec.name), catchup=False, max_active_runs=1, tags=TAGS,
             schedule=CronDataIntervalTimetable(spec.health.schedule, timezone="UTC"),
             is_paused_upon_creation="health" not in spec.model_fields_set) as dag:  # runs once asked for
        check_health(spec.name)
    out.append(dag)

    if spec.windowed:  # windows and replays read one topic into one table
        with DAG(dag_id=dag_ids.interval(spec.name), catchup=False, max_active_runs=4, tags=TAGS,
                 schedule=CronDataIntervalTimetable(spec.schedule, timezone="UTC"), is_paused_upon_creation=True,
                 default_args={"retries": 2, "retry_delay": timedelta(seconds=30)}) as dag:
            window = StreamfillBackfillOperator(task_id="backfill_window", entry=spec.name, spec=spec, window=True)
            checked = StreamfillQualityOperator(task_id="quality", entry=spec.name, spec=spec, job=window.output,
                                                table=spec.interval_target)
            checked >> announce_window.override(outlets=[tables.windows])(spec.name, window.output)
        out.append(dag)

    # one announcement per run; the next run waits on the triggerer for the next one (announce_operator.py). A
    # continuous DAG needs a start date: without one Airflow 3.3 gives its second run the first one's logical date
    with DAG(dag_id=dag_ids.announce(spec.name), schedule="@continuous", max_active_runs=1, catchup=False,
             start_date=CONTINUOUS_SINCE, tags=TAGS, is_paused_upon_creation=False, doc_md=__doc__,
             default_args={"retries": 3, "retry_delay": timedelta(seconds=15)}) as dag:
        StreamfillAnnounceOperator(task_id="announce", job=spec.name, asset=tables.stream,
                                   every=timedelta(seconds=spec.announce_every_s),
                                   postgres_conn_id=ConnIds.of(spec).postgres)
    out.append(dag)

    with DAG(dag_id=dag_ids.quality(spec.name), catchup=False, max_active_runs=1, tags=TAGS,
             schedule=CronDataIntervalTimetable(spec.quality_schedule, timezone="UTC"),
             is_paused_upon_creation=True) as dag:
        StreamfillQualityOperator(task_id="quality", entry=spec.name, spec=spec, whole_table=True,
                                  fresh_minutes=spec.health.max_commit_age_minutes)
    out.append(dag)
    return out


@task
def prune_history() -> None:
    from streamfill.orchestration.endpoints import endpoints
    from streamfill.settings import get_settings
    from streamfill.spark_jobs.maintenance import prune

    apply = bool(get_current_context()["params"]["apply"])
    # each offsets_db the entries write (postgres_conn_id), with the cluster of its first entry there
    databases = {ConnIds().postgres: ConnIds()}
    for spec in JOBS.values():
        databases.setdefault(ConnIds.of(spec).postgres, ConnIds.of(spec))
    for conns in databases.values():
        with classed():
            where = endpoints(conns)
        print(f"offsets_db of connection {conns.postgres}:", flush=True)
        pruned = prune(where.db_url, get_settings().retention(), apply=apply,
                       progress=lambda line: print(line, flush=True), kafka=where.kafka)
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
