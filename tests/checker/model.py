"""What the table, the dead letters and the offsets must hold after a scenario: the contract of docs/guarantees.md
applied to the scenario's steps one by one, in plain Python. The harness drives PostgreSQL and this model in
lockstep and compares them at the end.

- append-new (the Kafka coordinates as key): every record is a row or a dead letter, once;
- replace: per key, the newest version: within one topic-partition the higher offset, whatever the timestamps;
  between partitions (and topics) the later Kafka timestamp (a record without one older than any with one), a
  positioned table's source position before it, then the higher topic, partition and offset. Within a batch only
  each key's newest record is written: the last of each partition, then the newest of those by that order (an
  older one of the same batch is superseded, neither row nor dead letter);
- a record the table refuses is a dead letter with dead letters on; with them off its batch fails and commits
  nothing;
- what a user deleted stays deleted and what a user updated stays updated, until a newer version of its key;
- a tombstone (deletes) is a version too: it removes its key's row when the row is not newer, and a later
  upsert of the key lands only when it is newer than the newest tombstone of the key ever committed; offsets_db's
  deleted keys are each key's newest tombstone;
- a parsed table (its records encoded as Kafka carries them, read by the production parse) ends with the same
  rows, dead letters and deleted keys, its rows with each record's amount and time: the model never sees the
  encoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from streamfill.connectors.postgres.sink_options import REPLACE
from tests.checker.scenario import SEMANTIC_COLUMNS, Record, Table, Writer, version_value

Coordinates = tuple[str, int, int]


def rank(stamp: datetime | None, topic: str, partition: int, offset: int, position: int | None = None) -> tuple:
    """The order of a key's versions between partitions (connectors.postgres.sink_options.VERSION_ORDERS): a
    positioned table's source position first (None for a table without one ranks all alike)."""
    return (position is not None, position or 0, stamp is not None, stamp.timestamp() if stamp else 0.0, topic,
            partition, offset)


Version = tuple  # (stamp, topic, partition, offset, position): the arguments of rank


def newer(old: Version, new: Version, strict: bool = False) -> bool:
    """Whether `new` is at least as new as `old` (newer, when strict): within one topic-partition by offset,
    between partitions by rank (connectors.postgres.versions)."""
    if old[1:3] == new[1:3]:
        return old[3] < new[3] if strict else old[3] <= new[3]
    return rank(*old) < rank(*new) if strict else rank(*old) <= rank(*new)


@dataclass
class Model:
    table: Table
    rows: dict[tuple, dict] = field(default_factory=dict)  # the table's key -> the row's columns
    exists: bool = False  # the sink created the table
    check_on: bool = False  # the user's CHECK (length(v) < 10)
    trigger_on: bool = False  # the user's insert trigger counts inserted rows
    inserts: int = 0  # rows inserted while the trigger was on
    by_hand: bool = False  # the column the user added, DEFAULT 'h'
    extra: bool = False  # the column evolveSchema added
    dead: dict[int, set[Coordinates]] = field(default_factory=dict)  # per writer
    committed: dict[int, dict[int, int]] = field(default_factory=dict)  # per job writer: partition -> next offset
    deleted: set[Coordinates] = field(default_factory=set)  # rows the user deleted (append-new: by offset)
    pruned_dead: dict[int, set[Coordinates]] = field(default_factory=dict)  # dead letters a prune removed
    pruned: bool = False  # offsets_db's history was pruned: each job's committed batches are a recent run of them
    tombs: dict[str, Version] = field(default_factory=dict)  # deletes: per key, its newest tombstone's version
    side: set[tuple] = field(default_factory=set)  # routed: the second table's rows (append-new)

    def prune(self) -> None:
        """Every dead letter committed so far is older than the prune's age: it goes."""
        for index, dead in self.dead.items():
            self.pruned_dead.setdefault(index, set()).update(dead)
        self.dead = {}
        self.pruned = True

    def _key(self, row: dict) -> tuple:
        if self.table.keyed:
            return (row["k"],)
        return row["topic"], row["partition"], row["offset"]

    @staticmethod
    def _row_version(row: dict) -> Version:
        return row["kafka_timestamp"], row["topic"], row["partition"], row["offset"], row.get("_position")

    def refused(self, record: Record) -> bool:
        return self.check_on and not record.tomb and len(record.value) >= 10

    def attempted(self, topic: str, records: list[Record]) -> list[Record]:
        """The records of a batch the sink writes: not the poison, and in replace by a key only each key's newest."""
        valid = [r for r in records if not r.poison and not r.side]
        if not (self.table.mode == REPLACE and self.table.keyed):
            return valid
        latest: dict[tuple[str, int], Record] = {}  # the last record of each key in each partition
        for r in valid:
            if (r.key, r.partition) not in latest or latest[(r.key, r.partition)].offset < r.offset:
                latest[(r.key, r.partition)] = r
        newest: dict[str, Record] = {}
        for r in latest.values():
            if r.key not in newest or rank(r.stamp, topic, r.partition, r.offset, r.position) > rank(
                    newest[r.key].stamp, topic, newest[r.key].partition, newest[r.key].offset, newest[r.key].position):
                newest[r.key] = r
        return sorted(newest.values(), key=lambda r: (r.partition, r.offset))

    def write(self, index: int, writer: Writer, topic: str, records: list[Record], evolved: bool
              ) -> list[Record]:
        """Apply one batch; returns the records the table refuses. With dead letters off and a refusal, nothing
        is applied (the batch fails)."""
        attempted = self.attempted(topic, records)
        # an upsert older than its key's recorded delete is left out before it is inserted: nothing refuses it
        refused = [r for r in attempted if self.refused(r) and not self._under_tomb(topic, r)]
        if refused and not writer.dead_letters:
            return refused
        self.exists = True
        self.extra = self.extra or evolved
        self.side |= {(topic, r.partition, r.offset, r.stamp, r.key) for r in records if r.side}
        for r in attempted:
            if self.refused(r) or self._tombstone(topic, r):
                continue
            row = {"topic": topic, "partition": r.partition, "offset": r.offset, "kafka_timestamp": r.stamp,
                   "k": r.key, "v": r.value}
            if self.table.positioned:
                row[self.table.version_column] = version_value(self.table.version_column, r.position)
                row["_position"] = r.position
            if self.table.encoding is not None:
                row.update(amount=r.amount, at=r.at)
            if evolved:
                row["extra"] = r.offset if self.table.widens else f"e{r.offset}"
            key = self._key(row)
            was = self.rows.get(key)
            if was is None:
                self.rows[key] = {**({"extra": None} if self.extra else {}), **({"by_hand": "h"} if self.by_hand
                                                                               else {}), **row}
                self.inserts += self.trigger_on
            elif self.table.mode == REPLACE and newer(self._row_version(was), self._row_version(row)):
                was.update(row)
        dead = self.dead.setdefault(index, set())
        dead |= {(topic, r.partition, r.offset) for r in records if r.poison}
        dead |= {(topic, r.partition, r.offset) for r in refused}
        if writer.job:
            ends = self.committed.setdefault(index, {})
            for r in records:
                ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        return refused

    def _under_tomb(self, topic: str, r: Record) -> bool:
        """An upsert no newer than its key's newest recorded tombstone."""
        return r.key in self.tombs and newer((r.stamp, topic, r.partition, r.offset, r.position), self.tombs[r.key])

    def _tombstone(self, topic: str, r: Record) -> bool:
        """Apply a tombstone, or say whether an upsert is older than its key's newest tombstone: True when the
        record changes nothing more."""
        version = (r.stamp, topic, r.partition, r.offset, r.position)
        if not r.tomb:
            return self._under_tomb(topic, r)
        if r.key not in self.tombs or newer(self.tombs[r.key], version, strict=True):
            self.tombs[r.key] = version
        row = self.rows.get((r.key,))
        if row is not None and newer(self._row_version(row), version):
            del self.rows[(r.key,)]
        return True

    def planned(self, evolved: bool) -> None:
        """The sink made or evolved the table when it planned a write (before any commit)."""
        if evolved and not self.extra:
            self.extra = True
            for row in self.rows.values():
                row.setdefault("extra", None)
        self.exists = True

    def delete(self, partition: int, remainder: int) -> set[Coordinates]:
        gone = {key: row for key, row in self.rows.items()
                if row["partition"] == partition and row["offset"] % 5 == remainder}
        for key in gone:
            del self.rows[key]
        coordinates = {(r["topic"], r["partition"], r["offset"]) for r in gone.values()}
        self.deleted |= coordinates
        return coordinates

    def update(self, remainder: int) -> int:
        changed = [row for row in self.rows.values() if row["offset"] % 3 == remainder and len(row["v"]) < 10]
        for row in changed:
            row["v"] = row["v"].upper()
        return len(changed)

    def add_by_hand(self) -> None:
        self.by_hand = True
        for row in self.rows.values():
            row["by_hand"] = "h"

    def expected_rows(self) -> set[tuple]:
        names = self.columns()
        return {tuple(row.get(n) for n in names) for row in self.rows.values()}

    def columns(self) -> list[str]:
        return ["topic", "partition", "offset", "kafka_timestamp", *([self.table.version_column] if self.table.positioned
                                                                     else []), "k", "v",
                *(SEMANTIC_COLUMNS if self.table.encoding is not None else []),
                *(["extra"] if self.extra else []),
                *(["by_hand"] if self.by_hand else [])]
