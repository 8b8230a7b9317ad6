"""What a launch, a task or the page says when offsets_db stands at another migration revision."""

from __future__ import annotations

import pytest

from streamfill.offsets_db import revision

pytestmark = pytest.mark.unit

KNOWN = ("0001", "0002", "0003")


def test_the_code_needs_its_newest_migration():
    assert revision.revisions()[-1] == max(revision.revisions()) and len(set(revision.revisions())) > 1


def test_the_same_revision_is_no_problem():
    assert revision.problem("0003", KNOWN, "streamfill") is None


def test_an_older_revision_names_both_and_the_upgrade():
    said = revision.problem("0002", KNOWN, "streamfill")
    assert said == ("offsets_db is at migration revision 0002 and this streamfill needs revision 0003: stop the "
                    "streams, then run `streamfill db upgrade` (docs/upgrading.md)")


def test_a_revision_of_a_newer_streamfill_says_to_install_it_not_to_migrate_down():
    said = revision.problem("0009", KNOWN, "streamfill")
    assert "revision 0009, which this streamfill (its newest revision is 0003) does not know" in said
    assert "Install that version here" in said


def test_no_offsets_db_at_all_says_where_to_run_the_upgrade():
    said = revision.problem(None, KNOWN, "team_offsets")
    assert "no migration revision in schema team_offsets" in said and "streamfill db upgrade" in said
