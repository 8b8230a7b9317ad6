"""The checks of a triggered run's form: its conf may set only the DAG's declared Params, and a backfill check's
error is told in the replay form's words."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from streamfill.errors import OptionError
from streamfill.spark_jobs.job_flags import flag

# the backfill's flags the replay form sets, each as the form's field named like the flag (--chunk-size is
# chunk_size), so that a check of the backfill fails in the form's words
FORM_FIELDS = {f: f[2:].replace("-", "_")
               for f in map(flag, ("job", "from_", "to", "mode", "table", "chunk_size"))}
_FLAG = re.compile("(?:" + "|".join(map(re.escape, FORM_FIELDS)) + r")\b")


def refuse_unknown_conf(dag_id: str, conf: Mapping[str, object], params: Mapping[str, object]) -> None:
    """A triggered run's conf may only set the DAG's declared Params (`dag.params`: the task's merged params hold
    the conf's keys too). Airflow accepts any key, so a misspelt `from` would otherwise replay the whole topic
    from the default."""
    for key in sorted(set(conf) - set(params)):
        close = difflib.get_close_matches(key, list(params), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise OptionError(key, conf[key], f"is not a field of {dag_id}'s form (its fields: {', '.join(params)})",
                          f"{hint}Trigger the run again with the form's fields only")


def as_form_error(exc: OptionError) -> OptionError:
    """A backfill check's error in the replay form's words: its fields, not the command line's flags."""
    def words(text: str) -> str:
        return _FLAG.sub(lambda m: FORM_FIELDS[m.group(0)], text)

    return OptionError(FORM_FIELDS.get(exc.option, exc.option), exc.value, words(exc.problem), words(exc.fix))
