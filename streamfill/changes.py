"""The columns a pipeline's parse adds for tables that follow their topics (docs/pipelines.md): deletes, one topic
into several tables, and the source position of a change-data-capture event. The parse (spark_jobs.pipelines)
writes them and the sink (connectors.postgres) reads them, both by these names."""

from __future__ import annotations

from typing import Literal, get_args

DELETE_COLUMN = "_delete"  # boolean, never null: true when the record deletes its key's row
ROUTE_COLUMN = "_route"  # text: the table a routed record goes to, as the entry names it
SOURCE_POSITION = "source_position"  # decimal(38,0): a change event's position in its source database's log
SOURCE_POSITION_TYPE = "decimal(38,0)"

# an entry's `deletes:`, the default first: none keeps a null value a dead letter, tombstone makes it a delete
DeletesMode = Literal["none", "tombstone"]
DELETES: tuple[str, ...] = get_args(DeletesMode)
NO_DELETES, TOMBSTONE = DELETES
