"""streamfill: Kafka batch-plus-streaming on PySpark, Airflow and PostgreSQL.

One top-level name is all a shared environment gets: the wheel installs the repository's folders below as
subpackages of this one (`streamfill.connectors` from connectors/, and so on; pyproject.toml's package-dir says
the same), and an editable install maps them likewise."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("cli", "connectors", "offsets_db", "orchestration", "spark_jobs")

# A process that finds this package through a checkout's folder on sys.path (a Spark worker started in the checkout,
# a script run from it) finds the subpackages beside it, where the wheel would have put them inside.
if (REPO_ROOT / "pyproject.toml").is_file() and all((REPO_ROOT / name).is_dir() for name in SUBPACKAGES):
    __path__.append(str(REPO_ROOT))
