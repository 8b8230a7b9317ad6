#!/usr/bin/env bash
# docker compose's airflow-init service, run once before the other Airflow services start: Airflow's
# metadata schema, offsets_db's migrations, and the admin login of Airflow's simple auth manager (user admin,
# password STREAMFILL_AIRFLOW_PASSWORD), written to the passwords file the API server reads.
set -euo pipefail

: "${STREAMFILL_AIRFLOW_PASSWORD:?set STREAMFILL_AIRFLOW_PASSWORD (the Airflow admin password)}"
passwords=${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?set AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE}

airflow db migrate
streamfill db upgrade

umask 077
python - "$passwords" <<'PY'
import json
import os
import sys

with open(sys.argv[1], "w") as out:
    json.dump({"admin": os.environ["STREAMFILL_AIRFLOW_PASSWORD"]}, out)
os.chmod(sys.argv[1], 0o600)
PY
echo "Airflow login: user admin, password from STREAMFILL_AIRFLOW_PASSWORD (written to $passwords)"
