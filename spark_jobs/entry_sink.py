"""The `streamfill_postgres` options a launch writes an entry's rows with: its table, columns, key and mode, its
dead letters, and the offsets committed with them."""

from __future__ import annotations

import json

from streamfill.connectors.postgres import postgres_sink_declarations as sink
from streamfill.connectors.postgres.sink_options import REPLACE
from streamfill.errors import OptionError
from streamfill.partitions import Positions, to_json_shape
from streamfill.spark_jobs.pipelines import PipelineSpec


def sink_options(spec: PipelineSpec, job: str, table: str, mode: str, url: str, generation: int | None = None,
                 ends: Positions | None = None) -> dict[str, str]:
    """Valid rows to `table` with the entry's column types and key (columns it adds are added to the table),
    dead letters to offsets_db.dead_letters, offsets committed in the same transaction by the launch holding
    the job (`generation`), as the batch ending at `ends` (a backfill's chunk) when given. A routed entry writes
    each of its tables with their own columns, key and mode; an entry that deletes has its deletes applied."""
    options = {sink.TABLE.key: table, sink.JOB.key: job, sink.DEAD_LETTERS.key: str(spec.dead_letters).lower(),
               sink.URL.key: url, sink.EVOLVE_SCHEMA.key: "true"}
    if spec.can_delete:
        if mode != REPLACE:
            raise OptionError("--mode", mode, f"cannot write entry {spec.name!r}: its records delete keys "
                              "(deletes: tombstone, or a change-data-capture format), which only mode replace "
                              "applies", "Use --mode replace")
        options[sink.DELETES.key] = "true"
    routes = spec.route_tables()
    if routes:
        if table != spec.table or mode != spec.mode:
            given = ("--table", table) if table != spec.table else ("--mode", mode)
            raise OptionError(*given, f"cannot apply to entry {spec.name!r}: it routes its records by "
                              f"{spec.route.field} to the tables {', '.join(r.table for r in routes)}, each with "
                              "its own mode", "Run the entry as it is, into its tables; or declare another entry")
        options[sink.ROUTES.key] = json.dumps({r.table: {  # each table's key, mode and types
            "columns": r.table_columns(), "key": list(r.key), "mode": r.mode,
            "columnTypes": _postgres_types(r.columns)} for r in routes})
    else:
        options.update({sink.MODE.key: mode, sink.KEY_COLUMNS.key: ",".join(spec.key),
                        sink.COLUMN_TYPES.key: json.dumps(_postgres_types(spec.columns))})
        if spec.version_column is not None and mode == REPLACE:
            options[sink.VERSION_COLUMN.key] = spec.version_column
    if generation is not None:
        options[sink.JOB_GENERATION.key] = str(generation)
    if ends is not None:
        options[sink.ENDING_OFFSETS.key] = json.dumps(to_json_shape(ends))
    return options


def _postgres_types(columns) -> dict[str, str]:
    return {name: c.column_type.postgres for name, c in columns.items()}
