"""One announcer process, as Airflow's triggerer runs it, for the announcement tests: it announces job J's commits
to the asset URI U as the stack's admin and ends once every commit is announced (or a failpoint kills it). A send
that left without an answer is sent again after RESEND_S (default: the announcer's own).

    python -m tests.integration.announce_driver J U EVERY_S [RESEND_S]
"""

from __future__ import annotations

import logging
import sys
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from streamfill.offsets_db import announcements
from streamfill.offsets_db.engine import make_engine
from streamfill.offsets_db.models import Job
from streamfill.orchestration.airflow_api import AirflowApi
from streamfill.orchestration.announce import RESEND_AFTER, Announcer
from streamfill.settings import Settings


def main(job: str, uri: str, every_s: float, resend_after: timedelta = RESEND_AFTER) -> None:
    settings = Settings()
    engine = make_engine(settings.offsets_db_url)

    def caught_up() -> bool:
        with Session(engine) as s:
            newest = s.scalar(select(Job.commits).where(Job.name == job))
        done = announcements.announced(engine, job)
        return announcements.pending(engine, job) is None and bool(done) and \
            done[-1]["commits"][1] == newest

    Announcer(engine, lambda: AirflowApi(settings), job, uri, timedelta(seconds=every_s), resend_after).run(
        stop=caught_up)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]),
         *([timedelta(seconds=float(sys.argv[4]))] if len(sys.argv) > 4 else []))
