#!/usr/bin/env bash
# The image's install steps, written only here: the Dockerfile runs them, and so does
# tests/unit/test_compose.py's install test (the `python` part, into a fresh venv).
#
#   install.sh os       as root: Java 17 for Spark, which runs in local mode inside the Airflow containers
#   install.sh python   as the environment's owner: streamfill with every role (`[all]`: one image serves every
#                       component), editable from this checkout (so the code finds spark_jobs/*.py and dags/
#                       beside it, as in `make install`), with the exact versions of
#                       constraints.txt when the image's Airflow (AIRFLOW_VERSION, which the official image
#                       sets) is theirs, else within pyproject.toml's ranges; apache-airflow held at the image's
#                       version either way; the apache-spark provider without its dependencies; then `pip check`
#                       fails the build on any broken requirement but the provider's pyspark-client.
#
# PYTHON names the interpreter (default: python, the image's Airflow environment).
set -euo pipefail

project=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}

case "${1:-}" in
  os)
    # openjdk's postinst links a man page, and slim Debian images have no man folders
    mkdir -p /usr/share/man/man1
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless
    apt-get clean
    rm -rf /var/lib/apt/lists/*
    java -version
    ;;
  python)
    airflow=${AIRFLOW_VERSION:?set AIRFLOW_VERSION to the image\'s Airflow version}
    pinned=$(sed -n 's/^apache-airflow==\(.*\)$/\1/p' "$project/constraints.txt")
    # apache-airflow==<image's version> on the same command line: pip may move any other package, never Airflow
    # itself (the way the image's docs and its own entrypoint add packages). The image of the constraints'
    # Airflow gets their exact versions; another Airflow gets the newest versions pyproject.toml's ranges allow.
    if [[ "$pinned" == "$airflow" ]]; then
      "$python" -m pip install -c "$project/constraints.txt" "apache-airflow==$airflow" -e "$project[all]"
    else
      echo "the image has Airflow $airflow and constraints.txt was tested with ${pinned:-?}: installing within" \
           "pyproject.toml's ranges, without the constraints" >&2
      "$python" -m pip install "apache-airflow==$airflow" -e "$project[all]"
    fi
    # the apache-spark provider (the tasks submit Spark through its hook) without its dependencies: it requires
    # pyspark-client, Spark Connect's client alone, which installs into PySpark's own package and leaves no local
    # mode; so pip check may name that one missing requirement, and no other
    provider=$(sed -n 's/^apache-airflow-providers-apache-spark==\(.*\)$/\1/p' "$project/constraints.txt")
    "$python" -m pip install --no-deps "apache-airflow-providers-apache-spark${provider:+==$provider}"
    problems=$("$python" -m pip check) || true
    echo "$problems"
    if grep -v -e "requires pyspark-client" -e "No broken requirements found" <<<"$problems" | grep -q .; then
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 os|python" >&2
    exit 2
    ;;
esac
