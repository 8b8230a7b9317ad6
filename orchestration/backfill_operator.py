"""The operator of a bounded read of an entry's topic: a range (a backfill or a replay) or the run's data
interval (a window), into a table, exactly once, chunk by chunk. It returns the offsets_db job it ran under, for a
quality check or a committed-through sensor downstream."""

from __future__ import annotations

from streamfill.orchestration.endpoints import Endpoints
from streamfill.orchestration.entry_operator import EntryOperator
from streamfill.orchestration.failures import classed
from streamfill.orchestration.spark_submit import RETRY_WAIT
from streamfill.spark_jobs.backfill_args import BackfillArgs
from streamfill.spark_jobs.backfill_plan import DEFAULT_CHUNK
from streamfill.spark_jobs.pipelines import PipelineSpec
from streamfill.spark_jobs.pipelines.nested_specs import SparkSpec


class StreamfillBackfillOperator(EntryOperator):
    """`entry`'s topic from `from_` to `to` (earliest, latest, per-partition JSON or an ISO-8601 time; templated)
    into `table` (default: the entry's) in `mode` (default: the entry's), under `job` (default:
    `<entry>.backfill.<hash of from, to, table>`, so the same range twice is the same job and a re-run continues
    or changes nothing). `window=True`: the run's [data_interval_start, data_interval_end) into the entry's
    interval table in replace mode, under `<entry>.interval.<start>`; re-running a window rewrites the same rows."""

    template_fields = (*EntryOperator.template_fields, "from_", "to", "table", "mode", "job")

    def __init__(self, *, entry: str, from_: str | None = None, to: str | None = None, table: str | None = None,
                 mode: str | None = None, job: str | None = None, chunk_size: int = DEFAULT_CHUNK,
                 window: bool = False, wait_for_job: str = RETRY_WAIT, **kwargs) -> None:
        super().__init__(entry=entry, **kwargs)
        self.from_, self.to, self.table, self.mode, self.job = from_, to, table, mode, job
        self.chunk_size, self.window, self.wait_for_job = chunk_size, window, wait_for_job

    def execute(self, context) -> str:
        with classed():
            spec = self.entry_spec()
            args = self.plan(spec, context)
            launch_backfill(args, self.endpoints(spec), spec.spark)
        return args.job

    def plan(self, spec: PipelineSpec, context) -> BackfillArgs:
        """The launch's arguments, checked (before anything is read or recorded)."""
        from streamfill.connectors.postgres.sink_options import REPLACE
        from streamfill.errors import OptionError
        from streamfill.names import window_job
        from streamfill.orchestration.window_event import iso
        from streamfill.spark_jobs.backfill_args import backfill_job

        if spec.topic is None:
            raise OptionError("entry", spec.name, f"reads several topics ({spec.topics_option[1]}) and a backfill "
                              "reads one", "give an entry that reads one topic")
        if self.window:
            start, end = context["data_interval_start"], context["data_interval_end"]
            return BackfillArgs(job=window_job(spec.name, start), topic=spec.topic, from_=iso(start), to=iso(end),
                                table=spec.interval_target, mode=REPLACE, chunk_size=self.chunk_size,
                                pipeline=spec.name, wait_for_job=self.wait_for_job)
        for name, value in (("from_", self.from_), ("to", self.to)):
            if not value:
                raise OptionError(name, value, "is needed: a backfill reads a range",
                                  "give earliest, latest, per-partition JSON or an ISO-8601 time, or window=True")
        table = self.table or spec.table
        return BackfillArgs(job=self.job or backfill_job(spec.name, self.from_, self.to, table), topic=spec.topic,
                            from_=self.from_, to=self.to, table=table, mode=self.mode or spec.mode,
                            chunk_size=self.chunk_size, pipeline=spec.name, wait_for_job=self.wait_for_job)


def launch_backfill(args: BackfillArgs, ends: Endpoints, spark: SparkSpec | None = None) -> None:
    """spark-submit of the backfill `args` (orchestration/spark_submit.py)."""
    from streamfill.orchestration.spark_submit import spark_submit
    from streamfill.spark_jobs.job_flags import argv

    spark_submit("backfill.py", argv(BackfillArgs, job=args.job, topic=args.topic, from_=args.from_, to=args.to,
                                     table=args.table, mode=args.mode, chunk_size=args.chunk_size,
                                     pipeline=args.pipeline, wait_for_job=args.wait_for_job), ends,
                 spark=spark, name=f"streamfill-backfill-{args.job}")
