"""The operator of an entry's stream: Kafka into PostgreSQL, exactly once, until stopped. The YAML factory's
streamfill_stream__<entry> DAG is this operator with 20 retries; in a DAG of a team's own it is the same.

Where the stream's driver runs follows the entry's Spark connection (`spark_conn_id`): a Spark Connect connection
(the apache-spark provider's type `spark_connect`) runs it on that server, detached from the task, which then
defers to its supervision on Airflow's triggerer and holds no worker slot (docs/airflow.md, "Streams off the
Airflow workers"); any other, and a run that stops once caught up (available-now), runs spark-submit beside
the task, the driver in the task's process group."""

from __future__ import annotations

import os
import time

from streamfill.orchestration.endpoints import Endpoints
from streamfill.orchestration.entry_operator import EntryOperator
from streamfill.orchestration.failures import classed
from streamfill.spark_jobs.pipelines import PipelineSpec
from streamfill.trigger_grammar import parse_trigger

# a dead detached stream is started again after 15 s, then twice as long each time it dies without committing,
# at most every 10 minutes, for as long as the task is deferred
RESTART_AFTER_S, RESTART_AT_MOST_S = 15.0, 600.0


class StreamfillStreamOperator(EntryOperator):
    """The stream of `entry` on its connections, `trigger` (templated; empty: the entry's) between micro-batches.
    When it dies, the task's retries restart it and it resumes from its checkpoint or offsets_db; a refusal
    (its configuration, another launch holding the job) fails the task without retries. `check_conf`: refuse a
    run conf key that is not one of the DAG's Params (the factory's form)."""

    template_fields = (*EntryOperator.template_fields, "trigger")

    def __init__(self, *, entry: str, trigger: str | None = None, check_conf: bool = False, **kwargs) -> None:
        super().__init__(entry=entry, **kwargs)
        self.trigger, self.check_conf = trigger, check_conf

    def execute(self, context) -> None:
        with classed():
            if self.check_conf:
                from streamfill.orchestration.form_checks import refuse_unknown_conf

                refuse_unknown_conf(context["dag"].dag_id, context["dag_run"].conf or {}, context["dag"].params)
            spec = self.entry_spec()
            trigger = self.trigger or spec.trigger
            ends = self.endpoints(spec)
            # a run that stops once caught up (available-now) is bounded work: it runs beside its task, as a
            # backfill does
            if ends.spark_remote is None or "availableNow" in parse_trigger(trigger):
                self.launch(spec, trigger, ends)
                return
            self.detach(spec, ends, restarts=0)

    def detach(self, spec: PipelineSpec, ends: Endpoints, restarts: int) -> None:
        """Start the stream on the Spark Connect server of `ends` and defer to its supervision: the task holds no
        worker slot while the stream runs, and comes back only to start it again or to follow its entry."""
        from streamfill.orchestration.stream_supervision import StreamSupervision
        from streamfill.spark_jobs.stream_args import StreamArgs
        from streamfill.spark_jobs.stream_detached import start_detached

        pipeline = self.entry if self.entry != spec.name else None
        args = StreamArgs.from_flags(job=spec.name, trigger=self.trigger or spec.trigger, pipeline=pipeline)
        run = start_detached(args, ends.spark_remote, ends.kafka, ends.db_url,
                             {"dag_id": os.environ.get("AIRFLOW_CTX_DAG_ID"),
                              "run_id": os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")})
        self.log.info("%s; supervised from Airflow's triggerer", run.describe())
        self.defer(trigger=StreamSupervision(spec.name, run.run_id, time.time(), spec.model_dump_json(), pipeline,
                                             self.conn_ids(spec).postgres,
                                             jobs_file=str(self.jobs_file) if self.jobs_file else None),
                   method_name="supervised", kwargs={"restarts": restarts, "started": time.time()})

    def supervised(self, context, event: dict, restarts: int = 0, started: float = 0.0) -> None:
        """The supervision fired: the stream's query is gone, or its entry changed. A stream stopped on request
        (`streamfill stream --stop`) ends the task; another is started again after a backoff, one whose entry
        changed at once, after its query stopped between batches."""
        from datetime import timedelta

        from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

        from streamfill.orchestration.stream_supervision import ENTRY_CHANGED
        from streamfill.spark_jobs.stream_detached import run_status, stop_detached

        with classed():
            spec = self.entry_spec()
            ends = self.endpoints(spec)
            if event["state"] == ENTRY_CHANGED:
                self.log.info("stream %s: %s; stopping it between batches to start it with the new entry",
                              spec.name, event.get("change"))
                stop_detached(ends.db_url, spec.name, stop_grace(spec), ends.spark_remote, status="restarted")
                self.detach(spec, ends, restarts=0)
                return
            if run_status(ends.db_url, event["run_id"]) == "stopped":
                self.log.info("stream %s was stopped on request (run %s); the task ends", spec.name, event["run_id"])
                return
        committed = event.get("last_commit") is not None and event["last_commit"] > _iso(started)
        restarts = 0 if committed else restarts
        wait = min(RESTART_AT_MOST_S, RESTART_AFTER_S * 2 ** restarts)
        self.log.warning("stream %s: its query is gone (run %s, last commit %s); starting it again in %.0f s",
                         spec.name, event["run_id"], event.get("last_commit") or "never", wait)
        self.defer(trigger=TimeDeltaTrigger(timedelta(seconds=wait)), method_name="restart",
                   kwargs={"restarts": restarts + 1})

    def restart(self, context, event: object = None, restarts: int = 1) -> None:
        """The backoff is over: the stream starts again where offsets_db says, and is supervised again."""
        with classed():
            spec = self.entry_spec()
            self.detach(spec, self.endpoints(spec), restarts=restarts)

    def launch(self, spec: PipelineSpec, trigger: str, ends: Endpoints) -> None:
        """Client mode: spark-submit beside this task, the driver in its process group for the task's life; a
        stopped task lets the batch in flight commit (orchestration/spark_submit.py). A retry's launch waits for
        a launch still stopping (its stop grace and a minute)."""
        from streamfill.durations import stop_grace_seconds
        from streamfill.orchestration.spark_submit import retry_wait, spark_submit
        from streamfill.spark_jobs.job_flags import argv
        from streamfill.spark_jobs.stream_args import StreamArgs

        wait = retry_wait(stop_grace_seconds(spec.stop_grace, "stop_grace"))
        spark_submit("stream.py", argv(StreamArgs, job=spec.name, trigger=trigger, wait_for_job=wait), ends,
                     graceful=True, spark=spec.spark, name=f"streamfill-stream-{spec.name}")


def stop_grace(spec: PipelineSpec) -> float:
    from streamfill.durations import stop_grace_seconds

    return stop_grace_seconds(spec.stop_grace, "stop_grace")


def _iso(unix: float) -> str:
    """A Unix time as the ISO text the supervision's events carry times in."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(unix, timezone.utc).isoformat()
