"""The `streamfill` command's group: whatever error a command raises ends it with one message on stderr and the
exit code of what it was (streamfill.console.EXIT_CODES, docs/operations.md#exit-codes), never a bare traceback
with exit code 1 for everything."""

from __future__ import annotations

import typer
from typer.core import TyperGroup


class Commands(TyperGroup):
    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort):
            raise  # Typer's own: a usage error exits 2, typer.Exit its code
        except Exception as exc:
            from streamfill.spark_jobs.exits import ended  # heavy: only once a command failed

            raise ended(exc) from None
