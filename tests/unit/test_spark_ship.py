"""What a launch on a Spark cluster ships for workers without streamfill (spark_jobs/py_files.py): which packages
go into the archive, the archive cached by its content, the user's own archive, and Airflow's spark-submit line.
The cluster run itself: tests/integration/test_jobs.py."""

from __future__ import annotations

import sys
import zipfile
import zipimport

import pytest

from streamfill import REPO_ROOT
from streamfill.errors import OptionError
from streamfill.spark_jobs import py_files
from tests.packaging import pyproject
from tests.unit.test_layers import imports_of, source_folder

pytestmark = pytest.mark.unit


def test_the_shipped_packages_are_installed_ones_and_import_nothing_outside_them():
    installed = set(pyproject()["tool"]["setuptools"]["packages"])
    assert set(py_files.PACKAGES) <= installed
    folders = {source_folder(name) for name in py_files.PACKAGES}
    outside = [f"{path} imports {module} ({target})"
               for folder in folders for file in (REPO_ROOT / folder).rglob("*.py")
               for path in [str(file.relative_to(REPO_ROOT))] for module, target in imports_of(REPO_ROOT, path)
               if target.split("/")[0] not in folders]
    assert outside == []


def test_the_archive_holds_the_packages_with_their_data_and_imports_from_a_zip(tmp_path):
    path = py_files.build(tmp_path)
    names = zipfile.ZipFile(path).namelist()
    for expected in ("streamfill/__init__.py", "streamfill/connectors/spark/source.py",
                     "streamfill/spark_jobs/pipelines/compile.py",
                     "streamfill/offsets_db/migrations/script.py.mako"):  # package data too
        assert expected in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    parts = {n.split("/")[1] for n in names if n.count("/") > 1}
    assert parts == {"connectors", "offsets_db", "spark_jobs"}  # no app, no orchestration
    assert {n.split("/")[0] for n in names} == {"streamfill"}
    assert zipimport.zipimporter(str(path)).find_spec("streamfill") is not None


def _tree(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return {"pkg": root / "pkg"}


def test_the_archive_is_built_once_per_content(tmp_path):
    roots = _tree(tmp_path / "src", {"pkg/__init__.py": "", "pkg/a.py": "A = 1\n", "pkg/data/x.json": "{}"})
    cache = tmp_path / "cache"
    first = py_files.build(cache, roots)
    stamp = first.stat().st_mtime_ns
    # compiled caches and hidden files are not content
    _tree(tmp_path / "src", {"pkg/__pycache__/a.cpython-311.pyc": "x", "pkg/.a.py.swp": "x"})
    assert py_files.build(cache, roots) == first and first.stat().st_mtime_ns == stamp  # reused, not rewritten
    assert sorted(zipfile.ZipFile(first).namelist()) == ["pkg/__init__.py", "pkg/a.py", "pkg/data/x.json"]
    # the same files elsewhere make the same bytes
    elsewhere = _tree(tmp_path / "copy", {"pkg/__init__.py": "", "pkg/a.py": "A = 1\n", "pkg/data/x.json": "{}"})
    assert py_files.build(tmp_path / "cache2", elsewhere).read_bytes() == first.read_bytes()

    (tmp_path / "src" / "pkg" / "a.py").write_text("A = 2\n")
    second = py_files.build(cache, roots)
    assert second != first and second.name.startswith("streamfill-py-") and first.is_file()
    assert zipfile.ZipFile(second).read("pkg/a.py") == b"A = 2\n"
    assert not list(cache.glob("*.partial"))


def test_the_users_archive_replaces_the_built_one(tmp_path):
    home = tmp_path / "home"
    mine = tmp_path / "mine.zip"
    mine.write_bytes(b"PK")
    assert py_files.archive(home, {py_files.OVERRIDE_ENV: str(mine)}) == mine
    assert not (home / "spark").exists()  # nothing built

    wheel = tmp_path / "streamfill-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK wheel")
    shipped = py_files.archive(home, {py_files.OVERRIDE_ENV: str(wheel)})
    # Spark puts only .zip, .egg and .jar files on a Python worker's sys.path
    assert shipped.parent == home / "spark" and shipped.suffix == ".zip" and shipped.read_bytes() == b"PK wheel"
    assert py_files.archive(home, {py_files.OVERRIDE_ENV: str(wheel)}) == shipped

    assert py_files.archive(home, {}).name.startswith("streamfill-py-")


@pytest.mark.parametrize("name, problem", [("code.tar.gz", "is not a .zip, .egg or .whl file"),
                                           ("missing.zip", "is not a file here")])
def test_a_bad_users_archive_names_the_setting_and_the_fix(tmp_path, name, problem):
    (tmp_path / "code.tar.gz").write_bytes(b"")
    with pytest.raises(OptionError) as raised:
        py_files.archive(tmp_path, {py_files.OVERRIDE_ENV: str(tmp_path / name)})
    assert str(raised.value).startswith(f"setting STREAMFILL_SPARK_PY_FILES='{tmp_path / name}': {problem}")


def test_only_cluster_masters_ship():
    assert [py_files.ships(m) for m in ("local", "local[*]", "local[2]", "spark://h:7077", "yarn",
                                        "k8s://https://h:6443")] == [False, False, False, True, True, True]


@pytest.mark.parametrize("master", ["local[*]", "spark://h:7077"])
def test_airflows_spark_submit_ships_the_code_and_keeps_the_users_python_on_a_cluster(monkeypatch, tmp_path,
                                                                                      master):
    from streamfill.orchestration import spark_submit
    from streamfill.orchestration.endpoints import Endpoints

    launched = {}

    class Done:
        stdout: list[str] = []

        def wait(self):
            return 0

        def poll(self):
            return 0

    def popen(cmd, env, **_):
        launched.update(cmd=cmd, env=env)
        return Done()

    spark_submit.requirements.check_java()  # this machine's Java, checked once before Popen is a stand-in
    monkeypatch.setattr(spark_submit.subprocess, "Popen", popen)
    monkeypatch.setenv("STREAMFILL_HOME", str(tmp_path))
    monkeypatch.delenv("STREAMFILL_JOBS_FILE", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/workers/bin/python")
    ends = Endpoints("postgresql://h/db", {"bootstrap.servers": "k:9092"}, master)
    spark_submit.spark_submit("stream.py", ["--job", "j"], ends)
    cmd, env = launched["cmd"], launched["env"]
    if master.startswith("local"):
        assert "--py-files" not in cmd and env["PYSPARK_PYTHON"] == sys.executable
        return
    shipped = cmd[cmd.index("--py-files") + 1]
    assert shipped.startswith(str(tmp_path / "spark" / "streamfill-py-")) and zipfile.is_zipfile(shipped)
    assert f"spark.pyspark.driver.python={sys.executable}" in cmd
    assert env["PYSPARK_PYTHON"] == "/opt/workers/bin/python" and env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    # the driver imports the project from the archive: paths beside the repository are given, not derived
    assert env["STREAMFILL_JOBS_FILE"] == str(REPO_ROOT / "dags" / "streamfill_jobs.yaml")
