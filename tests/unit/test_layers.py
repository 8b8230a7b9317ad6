"""The layering stays true: each module imports only from its own layer or lower ones, no import circles, and
the demo is imported by nothing generic. Read from the code's own imports with `ast`, nothing is run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from streamfill import REPO_ROOT, SUBPACKAGES

pytestmark = pytest.mark.unit

# path prefix -> layer, lowest first; the longest prefix that matches a file decides its layer
LAYERS: dict[str, int] = {
    "streamfill/": 1,  # the base: settings, failpoints, names, topic-partitions, durations, errors
    "connectors/__init__.py": 2,
    "connectors/kafka/": 2,  # the Kafka core: plain Python, no Spark, no SQLAlchemy
    "offsets_db/": 3,  # the only code that names its tables; the exactly-once protocol
    "connectors/postgres/": 4,  # the sinks and the Spark layer
    "connectors/spark/": 4,
    "spark_jobs/": 5,  # the jobs, the pipelines, quality checks; the demo as an example
    "orchestration/": 6,  # the Airflow side and the DAG files
    "orchestration/ui/": 6,  # the streamfill page: an Airflow plugin
    "dags/": 6,
    "cli/": 7,  # the CLI and the local stack; the benchmarks beside it
    "bench/": 7,
}
NAMES = {1: "base", 2: "Kafka core", 3: "offsets_db", 4: "sinks and Spark layer", 5: "jobs", 6: "Airflow side",
         7: "CLI"}
# the demo is an example (its pipeline is an entry of the jobs file): only the CLI may import its producer
DEMO, DEMO_USERS = "spark_jobs/demo/", ("spark_jobs/demo/", "cli/", "bench/")
# modules whose layer forbids a dependency outright (the Kafka core and the base stay light)
FORBIDDEN = {"connectors/kafka/": ("pyspark", "sqlalchemy", "psycopg2", "great_expectations", "airflow",
                                    "openlineage"),
             "streamfill/": ("pyspark", "sqlalchemy", "psycopg2", "confluent_kafka", "great_expectations",
                             "airflow", "openlineage")}


MISSING = "(missing)"


def layer_of(path: str, layers: dict[str, int]) -> int | None:
    found = [p for p in layers if path == p or (p.endswith("/") and path.startswith(p))]
    return layers[max(found, key=len)] if found else None


def project_files(root: Path, layers: dict[str, int]) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                  if layer_of(str(p.relative_to(root)), layers) is not None
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def source_folder(module: str) -> str:
    """The repository path of an installed module's name: streamfill.connectors.kafka is connectors/kafka (the
    wheel puts the top-level folders under streamfill, streamfill.SUBPACKAGES)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[0] == "streamfill" and parts[1] in SUBPACKAGES:
        parts = parts[1:]
    return "/".join(parts)


def _module_file(root: Path, module: str) -> str | None:
    base = source_folder(module)
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def imports_of(root: Path, path: str) -> list[tuple[str, str]]:
    """(module as written, project file it resolves to) for every import of the file, lazy ones included."""
    tree = ast.parse((root / path).read_text(), path)
    package = Path(path).parent.as_posix().replace("/", ".")
    if Path(path).name != "__init__.py" and package == ".":
        package = ""
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        resolved = None
        for name in names:
            target = _module_file(root, name)
            if target:
                resolved = (name, target)
                break
        if resolved and resolved[1] != path:
            out.append(resolved)
        elif not resolved and names and _module_file(root, names[-1].split(".")[0]) and names[-1]:
            out.append((names[-1], MISSING))
    return out


def violations(root: Path, layers: dict[str, int], names: dict[int, str] = NAMES) -> list[str]:
    """Upward imports, imports of project modules that do not exist, and import circles, each naming the files."""
    problems = []
    graph: dict[str, set[str]] = {}
    for path in project_files(root, layers):
        mine = layer_of(path, layers)
        graph[path] = set()
        for module, target in imports_of(root, path):
            if target == MISSING:
                problems.append(f"{path} imports {module}, which is no module of the project")
                continue
            theirs = layer_of(target, layers)
            if theirs is None:
                continue
            graph[path].add(target)
            if theirs > mine:
                problems.append(f"{path} ({names.get(mine, mine)}) imports {module} from {target}, "
                                f"a higher layer ({names.get(theirs, theirs)})")
    problems += [f"import circle: {' -> '.join(c + [c[0]])}" for c in _circles(graph)]
    return problems


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one file (Tarjan), each as a list of files."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_imports_only_its_own_layer_or_lower_and_there_is_no_circle():
    assert violations(REPO_ROOT, LAYERS) == []


def test_every_module_of_the_project_has_a_layer():
    packages = ("streamfill", "connectors", "offsets_db", "spark_jobs", "orchestration", "dags", "cli", "bench")
    files = [str(p.relative_to(REPO_ROOT)) for name in packages for p in (REPO_ROOT / name).rglob("*.py")]
    assert files and [f for f in files if layer_of(f, LAYERS) is None] == []


def test_the_demo_is_imported_by_nothing_generic():
    users = [f"{path} imports {module}" for path in project_files(REPO_ROOT, LAYERS)
             for module, target in imports_of(REPO_ROOT, path)
             if target.startswith(DEMO) and not path.startswith(DEMO_USERS)]
    assert users == []


def test_the_base_and_the_kafka_core_stay_free_of_heavy_dependencies():
    found = []
    for path in project_files(REPO_ROOT, LAYERS):
        prefix = next((p for p in FORBIDDEN if path.startswith(p) and layer_of(path, LAYERS) == layer_of(p, LAYERS)),
                      None)
        if prefix is None:
            continue
        tree = ast.parse((REPO_ROOT / path).read_text())
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path} imports {m}" for m in mods if m.split(".")[0] in FORBIDDEN[prefix]]
    assert found == []


def test_the_check_finds_an_upward_import_and_a_circle_in_a_tiny_tree(tmp_path):
    files = {
        "base/__init__.py": "",
        "base/names.py": "from app.cli import main\n",  # upward: base -> app
        "core/__init__.py": "",
        "core/a.py": "from core import b\n",
        "core/b.py": "def f():\n    from core.a import x\n",  # a lazy import closes the circle a -> b -> a
        "app/__init__.py": "",
        "app/cli.py": "from base.names import *\nmain = 1\n",
        "app/old.py": "def f():\n    from core.gone import x\n",  # a lazy import of a module that was moved
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    layers = {"base/": 1, "core/": 2, "app/": 3}
    found = violations(tmp_path, layers, {1: "base", 2: "core", 3: "app"})
    assert "base/names.py (base) imports app.cli from app/cli.py, a higher layer (app)" in found
    assert "import circle: core/a.py -> core/b.py -> core/a.py" in found
    assert "import circle: app/cli.py -> base/names.py -> app/cli.py" in found
    assert "app/old.py imports core.gone, which is no module of the project" in found
    (tmp_path / "app/old.py").write_text("from core import a\n")
    (tmp_path / "base/names.py").write_text("import os\n")
    (tmp_path / "core/b.py").write_text("from base import names\n")
    assert violations(tmp_path, layers) == []
