"""Benchmark cleanup: removes what a run made in the stack a user works with, scratch databases included.

Each run removes, when it ends and also when it fails, its offsets_db jobs (with everything offsets_db keeps of
them), its tables and their staging tables, its topics and its local work folders. A script records each name
as it makes the thing, so only those exact names are touched, never a user's job or table. A topic of events a
script keeps across runs for speed is removed too, unless the run was given --keep-topic.

Run as a script, it removes what a run killed before its end left behind, by the names given (a benchmark's
job is named like its table, with - for _: job bench-sf-1a2b3c4d, table bench_sf_1a2b3c4d).

    .venv/bin/python bench/cleanup.py [--job NAME ...] [--table NAME ...] [--topic NAME ...]
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamfill.settings import Settings

KINDS = ("job", "table", "topic", "local folder")


def add_keep_topic(ap: argparse.ArgumentParser, topic: str) -> None:
    """--keep-topic, for a script that reuses a topic of events across runs."""
    ap.add_argument("--keep-topic", action="store_true",
                    help=f"keep the topic of events ({topic}) after the run, so the next run with the same "
                         "arguments skips producing it; by default it is deleted with the run's jobs and tables")


def plural(count: int, kind: str) -> str:
    return f"{count} {kind}" + ("" if count == 1 else "s")


def summary(removed: dict[str, list[str]], failed: list[str], kept: list[str]) -> str:
    """The one line a run prints at its end: what it removed, what it kept, what it could not remove."""
    parts = [plural(len(removed[k]), k) for k in KINDS if removed.get(k)]
    line = "removed " + (", ".join(parts) if parts else "nothing")
    if kept:
        line += f"; kept {plural(len(kept), 'topic')} ({', '.join(kept)}) for the next run (--keep-topic)"
    if failed:
        line += "; could not remove " + "; ".join(failed)
    return line


def drop_tables(engine, tables: list[str]) -> list[str]:
    """The benchmark's tables and the staging tables streams keep beside them; then the engine is disposed.
    Returns the tables dropped (those that existed), staging tables included."""
    from sqlalchemy import text

    from streamfill.connectors.postgres.stage import STAGE_PREFIX

    dropped: list[str] = []
    try:
        with engine.begin() as conn:
            for t in dict.fromkeys(tables):
                if conn.scalar(text("SELECT to_regclass(:t)"), {"t": '"{}"'.format(t.replace('"', '""'))}):
                    conn.execute(text(f'DROP TABLE IF EXISTS "{t}" CASCADE'))
                    dropped.append(t)
                for (stage,) in conn.execute(text("SELECT relname::text FROM pg_class WHERE relkind = 'r' AND "
                                                  "relname LIKE :p"),
                                             {"p": f"{STAGE_PREFIX}{t[:30]}_%".replace("_", r"\_")}):
                    conn.execute(text(f'DROP TABLE IF EXISTS "{stage}"'))
                    dropped.append(stage)
    finally:
        engine.dispose()
    return dropped


class Leftovers:
    """The names a run made, recorded as it makes them; `remove()` in the script's `finally` deletes them."""

    def __init__(self, settings: Settings, keep_topic: bool = False) -> None:
        self.settings, self.keep_topic = settings, keep_topic
        self.jobs: list[str] = []  # offsets_db jobs, by their exact names
        self.tables: list[str] = []
        self.topics: list[str] = []  # made for this run alone
        self.shared_topics: list[str] = []  # kept across runs: removed unless --keep-topic
        self.folders: list[Path] = []

    def job(self, name: str) -> str:
        self.jobs.append(name)
        return name

    def table(self, *names: str) -> str:
        self.tables.extend(names)
        return names[0]

    def topic(self, name: str, shared: bool = False) -> str:
        (self.shared_topics if shared else self.topics).append(name)
        return name

    def folder(self, path: Path) -> Path:
        self.folders.append(path)
        return path

    def doomed_topics(self) -> list[str]:
        return list(dict.fromkeys(self.topics + ([] if self.keep_topic else self.shared_topics)))

    def remove(self) -> str:
        """Every step runs even when another fails (a failure is reported in the line, not raised, so it never
        hides the run's own error); prints and returns the line."""
        removed: dict[str, list[str]] = {}
        failed: list[str] = []
        for kind, step in zip(KINDS, (self._jobs, self._tables, self._topics, self._folders), strict=True):
            try:
                removed[kind] = step()
            except Exception as exc:  # whatever one step raises, the other steps must still run
                failed.append(f"{kind}s ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
        kept = [t for t in dict.fromkeys(self.shared_topics) if self.keep_topic]
        line = summary(removed, failed, kept)
        print(line, flush=True)
        return line

    def _jobs(self) -> list[str]:
        if not self.jobs:
            return []
        from streamfill.offsets_db.store import OffsetStore

        store = OffsetStore(self.settings.offsets_db_url)  # its engine names offsets_db's schema
        try:
            return store.forget_jobs(self.jobs)
        finally:
            store.engine.dispose()

    def _tables(self) -> list[str]:
        if not self.tables:
            return []
        from sqlalchemy import create_engine

        return drop_tables(create_engine(self.settings.offsets_db_url), self.tables)

    def _topics(self) -> list[str]:
        wanted = self.doomed_topics()
        if not wanted:
            return []
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.settings.kafka_client())
        existing = set(admin.list_topics(timeout=10).topics)
        doomed = [t for t in wanted if t in existing]
        for future in (admin.delete_topics(doomed, operation_timeout=30).values() if doomed else ()):
            future.result(timeout=60)
        return doomed

    def _folders(self) -> list[str]:
        out = []
        for path in dict.fromkeys(self.folders):
            if path.exists():
                shutil.rmtree(path)
                out.append(str(path))
        return out


@contextmanager
def scratch_database(settings: Settings, prefix: str, before_drop: Callable[[], None] = lambda: None) -> Iterator[str]:
    """A database of its own for a run, with offsets_db's tables: its URL. It is dropped with all it holds when the
    run ends or fails (after `before_drop`, which closes the run's own connections), so the run touches nothing of
    the user's database."""
    import uuid

    from sqlalchemy import create_engine, make_url, text

    from streamfill.cli.stack.postgres import admin_url
    from streamfill.offsets_db.migrate import upgrade

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url(settings), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" OWNER "{settings.db_user}"'))
    try:
        url = make_url(settings.offsets_db_url).set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        yield url
    finally:
        before_drop()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()
        print(f"removed database {name}", flush=True)


def measured(measure, args: argparse.Namespace, *before) -> None:
    """measure(*before, args, settings, leftovers), then the run's leftovers removed, also when it failed."""
    from streamfill.settings import get_settings

    settings = get_settings()
    made = Leftovers(settings, getattr(args, "keep_topic", False))
    try:
        measure(*before, args, settings, made)
    finally:
        made.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", action="append", default=[], help="an offsets_db job to delete, with its history")
    ap.add_argument("--table", action="append", default=[], help="a table to drop, with its staging tables")
    ap.add_argument("--topic", action="append", default=[], help="a topic to delete")
    args = ap.parse_args()
    from streamfill.settings import get_settings

    made = Leftovers(get_settings())
    made.jobs, made.tables, made.topics = args.job, args.table, args.topic
    made.remove()


if __name__ == "__main__":
    main()
