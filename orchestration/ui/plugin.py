"""The Airflow plugin of the streamfill page, registered as the `airflow.plugins` entry point `streamfill` in
pyproject.toml: every install of the project (the local stack's venv, the compose image) loads it, with no
plugins folder to copy. The API server mounts the app at /streamfill; the nav entry "streamfill" shows it
inside the Airflow UI (at /plugin/streamfill)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from streamfill.orchestration.ui.routes import PREFIX, create_app


class StreamfillPlugin(AirflowPlugin):
    name = "streamfill"
    fastapi_apps = [{"app": create_app(), "url_prefix": PREFIX, "name": "streamfill"}]
    external_views = [{"name": "streamfill", "href": PREFIX.lstrip("/") + "/", "url_route": "streamfill",
                       "destination": "nav", "nav_top_level": True}]
