"""The streamfill page in the Airflow UI (issue 14): every job's lag, freshness, throughput, dead letters, data
loss and quality from offsets_db, with plots. `plugin` registers it with Airflow, `routes` serves it behind
Airflow's login (`auth`), `data` shapes what offsets_db.dashboard reads, `format` holds the pure helpers."""

PREFIX = "/streamfill"  # where the API server mounts the page
# the route answering the replay form's tasks who triggered their run (routes.py, orchestration/replay_access.py)
TRIGGER_ACCESS = "/api/trigger-access"
