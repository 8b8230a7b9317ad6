"""The commands the documentation shows exist as shown: every `streamfill ...` of README.md and docs/*.md (code
blocks and inline code) answers `--help`, and each option it names is one of that command's; every
`spark-submit spark_jobs/stream.py | backfill.py ...` names only the job's own flags; and every section of the docs
the code points a user at (`docs/<page>.md, "<heading>"`) is a heading of that page."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from streamfill import REPO_ROOT
from streamfill.cli.main import app
from streamfill.spark_jobs.backfill_args import BackfillArgs
from streamfill.spark_jobs.job_flags import flag
from streamfill.spark_jobs.stream_args import StreamArgs

pytestmark = pytest.mark.unit

PAGES = (REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.S | re.M)
INLINE = re.compile(r"(`+)(.+?)\1", re.S)
# what may stand before the command on a line: environment assignments, `docker compose exec <service>`, a path
PREFIX = r"(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:docker compose exec\s+\S+\s+)?(?:\S*/)?"
COMMAND = re.compile(rf"^\$?\s*{PREFIX}(streamfill|spark-submit)(?=\s|$)(.*)$")
STOP = {">", ">>", "<", "&&", "||", ";", "&", "2>&1"}  # what ends a command on a shell line
JOBS = {"spark_jobs/stream.py": StreamArgs, "spark_jobs/backfill.py": BackfillArgs}
SUBMIT_EXTRA = {"--master"}  # spark_jobs/job_flags.py parse_argv's extra flags


@dataclass(frozen=True)
class Shown:
    """One command line as a page shows it."""

    where: str  # page:line
    program: str  # streamfill or spark-submit
    words: tuple[str, ...]


def snippets(text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each shell line of the fenced blocks (backslash and indented continuations joined,
    comments cut) and of each inline code span (whitespace collapsed)."""
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(2)) + 1
        joined: list[tuple[int, str]] = []
        lines = block.group(2).split("\n")
        for i, raw in enumerate(lines):
            line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
            continues = joined and (joined[-1][1].endswith("\\") or
                                    (raw[:1].isspace() and COMMAND.match(joined[-1][1].strip())))
            if continues and line.strip():
                joined[-1] = (joined[-1][0], joined[-1][1].removesuffix("\\").rstrip() + " " + line.strip())
            else:
                joined.append((first + i, line))
        yield from ((n, " ".join(line.split())) for n, line in joined)
    outside = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for span in INLINE.finditer(outside):
        yield text.count("\n", 0, span.start()) + 1, " ".join(span.group(2).split())


def shown(pages: tuple[Path, ...] = PAGES, texts: dict[str, str] | None = None) -> list[Shown]:
    sources = texts if texts is not None else {p.name: p.read_text() for p in pages}
    out = []
    for name, text in sources.items():
        for line, snippet in snippets(text):
            found = COMMAND.match(snippet)
            if found:
                out.append(Shown(f"{name}:{line}", found.group(1), tuple(found.group(2).split())))
    return out


def _word(token: str) -> str:
    """A token without the brackets and punctuation a synopsis or a sentence puts around it."""
    return token.strip("[](){}.,:;'\"")


# Typer's commands are Click's (vendored by newer Typer): a group is a command with subcommands
Command = object


def _options(command: Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if param.param_type_name == "option":
            names.update(param.opts, param.secondary_opts)
    return names


def resolve(root: Command, words: tuple[str, ...]) -> tuple[list[tuple[str, ...]], list[str], list[str]]:
    """The command paths a shown line names (`a | b` gives each), the options it names, and its problems."""
    paths, problems = [()], []
    command = root
    i = 0
    while hasattr(command, "commands") and i < len(words) and not words[i].startswith("-"):
        word = _word(words[i])
        if word not in command.commands:
            problems.append(f"`{' '.join(('streamfill', *paths[0], words[i]))}`: no such command "
                            f"(commands here: {', '.join(sorted(command.commands))})")
            return paths, [], problems
        parent = command
        paths = [(*paths[0], word)]
        command = parent.commands[word]
        i += 1
        while i + 1 < len(words) and words[i] == "|" and _word(words[i + 1]) in parent.commands:
            paths.append((*paths[0][:-1], _word(words[i + 1])))  # `up | down | status`: alternatives
            i += 2
    options = []
    for token in words[i:]:
        if token in STOP or token == "|":
            break
        word = _word(token).split("=")[0]
        if word.startswith("--") and len(word) > 2:
            options.append(word)
    return paths, options, problems


def command_at(root: Command, path: tuple[str, ...]) -> Command:
    command = root
    for word in path:
        command = command.commands[word]
    return command


def problems_of(lines: list[Shown]) -> tuple[list[str], set[tuple[str, ...]]]:
    """What the shown `streamfill` lines get wrong, and every command path they name."""
    root = typer.main.get_command(app)
    problems, paths = [], set()
    for line in (s for s in lines if s.program == "streamfill"):
        found, options, wrong = resolve(root, line.words)
        problems += [f"{line.where}: {p}" for p in wrong]
        if wrong:
            continue
        for path in found:
            paths.add(path)
            known = _options(command_at(root, path))
            problems += [f"{line.where}: `streamfill {' '.join(path)}` has no option {o} (it has "
                         f"{', '.join(sorted(known))})" for o in options if o not in known]
    return problems, paths


def submit_problems(lines: list[Shown]) -> tuple[list[str], int]:
    """What the shown spark-submit lines of the jobs get wrong (flags after the script are the job's), and how many
    such lines there are."""
    problems, count = [], 0
    for line in (s for s in lines if s.program == "spark-submit"):
        script = next((i for i, w in enumerate(line.words) if w in JOBS), None)
        if script is None:
            continue
        count += 1
        cls = JOBS[line.words[script]]
        flags = {flag(f.name) for f in dataclasses.fields(cls)} | SUBMIT_EXTRA | {"--help"}
        for token in line.words[script + 1:]:
            if token in STOP or token == "|":
                break
            word = _word(token).split("=")[0]
            if word.startswith("--") and len(word) > 2 and word not in flags:
                problems.append(f"{line.where}: `spark-submit {line.words[script]}` has no flag {word} (it has "
                                f"{', '.join(sorted(flags))})")
    return problems, count


def test_every_streamfill_command_the_docs_show_answers_help_with_every_option_they_name():
    lines = shown()
    problems, paths = problems_of(lines)
    assert not problems, "\n".join(problems)
    # the parse finds the commands the pages show (the getting-started synopsis, the db group, a compose line)
    assert {("produce",), ("stream",), ("backfill",), ("quality",), ("jobs", "check"), ("db", "grants"),
            ("offsets", "lag"), ("stack", "status")} <= paths, sorted(paths)
    runner = CliRunner()
    for path in sorted(paths):
        done = runner.invoke(app, [*path, "--help"])
        assert done.exit_code == 0, (path, done.output[-2000:])
        assert "Usage:" in done.output, (path, done.output[-2000:])


def test_every_spark_submit_line_of_a_job_names_only_its_flags():
    problems, count = submit_problems(shown())
    assert not problems, "\n".join(problems)
    assert count >= 2, "the pages' spark-submit lines of spark_jobs/stream.py were not found"


def test_the_check_finds_a_made_up_command_option_and_flag():
    page = """
Run `streamfill stream --job orders --made-up 5` or `streamfill stack up | down | status`.

```bash
STREAMFILL_DB_URL=postgresql://x streamfill replay --job orders   # no such command
streamfill backfill --job orders --from earliest \\
    --to latest --chunky 5
streamfill stream --job orders [--trigger 5s|available-now]
                  [--wait-for-it 10m]
spark-submit --master yarn spark_jobs/stream.py --job orders --mode replace
```
"""
    lines = shown(texts={"page.md": page})
    problems, paths = problems_of(lines)
    assert any("page.md:2: `streamfill stream` has no option --made-up" in p for p in problems), problems
    assert any("page.md:5: `streamfill replay`: no such command" in p for p in problems), problems
    assert any("page.md:6: `streamfill backfill` has no option --chunky" in p for p in problems), problems
    assert any("page.md:8: `streamfill stream` has no option --wait-for-it" in p for p in problems), problems
    assert len(problems) == 4, problems
    assert {("stack", "up"), ("stack", "down"), ("stack", "status")} <= paths
    submitted, count = submit_problems(lines)
    assert count == 1 and len(submitted) == 1 and "has no flag --mode" in submitted[0], submitted


SECTION = re.compile(r"docs/([a-z-]+\.md)(?:,\s*|\s*\()\\?\"([^\"\\]+)\\?\"")
CODE_DIRS = ("streamfill", "connectors", "offsets_db", "spark_jobs", "orchestration", "cli", "bench", "dags")


def _headings(page: Path) -> list[str]:
    """The page's headings and the bold words that open a paragraph or a list item (`**Stopping a stream.**`)."""
    text = FENCE.sub("", page.read_text())
    found = re.findall(r"^#+\s+(.+)$", text, re.M) + re.findall(r"^(?:[-*]\s+)?\*\*([^*]+)\*\*", text, re.M)
    return [" ".join(h.replace("`", "").split()).rstrip(".:").lower() for h in found]


def test_every_docs_section_the_code_names_is_a_heading_of_that_page():
    """A message or docstring that sends a user to `docs/<page>.md, "<heading>"` names a heading the page has
    (the start of it is enough: "Deletes" for "Deletes: tombstones on a compacted topic")."""
    problems, found = [], 0
    for folder in CODE_DIRS:
        for source in sorted((REPO_ROOT / folder).rglob("*.py")):
            text = source.read_text()
            for match in SECTION.finditer(text):
                page, section = REPO_ROOT / "docs" / match.group(1), " ".join(match.group(2).split()).lower()
                found += 1
                if not page.is_file():
                    problems.append(f"{source.relative_to(REPO_ROOT)}: docs/{match.group(1)} does not exist")
                elif not any(h.startswith(section) for h in _headings(page)):
                    problems.append(f"{source.relative_to(REPO_ROOT)}: docs/{match.group(1)} has no section "
                                    f"\"{match.group(2)}\" (its headings: {', '.join(_headings(page))})")
    assert not problems, "\n".join(problems)
    assert found >= 10, found
