"""The page's FastAPI app, mounted by Airflow's API server under PREFIX: HTML views (overview, job, dead letters,
offset finder), the same data as JSON under /api, and Plotly's own plotly.min.js from the installed package.
Every route, the script included, needs Airflow's login (auth.READER); a job's routes answer only a user who
may read one of its DAGs (access.py), the lists show only those jobs. Read-only: GET only. One more route answers
the replay form's tasks: who triggered a run and what Airflow lets that user trigger (triggers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy.exc import SQLAlchemyError

from streamfill.errors import OptionError, StreamfillError
from streamfill.orchestration.connections import API_CONNECTION
from streamfill.orchestration.ui import PREFIX, TRIGGER_ACCESS, data, db, triggers
from streamfill.orchestration.ui import format as fmt
from streamfill.orchestration.ui.access import Access
from streamfill.orchestration.ui.auth import READER, AccessDep

TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                        autoescape=select_autoescape(default=True, default_for_string=True))


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def roots(request: Request) -> tuple[str, str]:
    """(this app's path, the Airflow UI's path), from where the API server mounted the app."""
    base = request.scope.get("root_path", "").rstrip("/")
    return base, base.removesuffix(PREFIX)


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    base, ui_root = roots(request)
    html = TEMPLATES.get_template(template).render(base=base, ui_root=ui_root, **context)
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def window_of(raw: str | None):
    try:
        return fmt.parse_window(raw)
    except fmt.WindowError as exc:
        raise HTTPException(400, str(exc)) from None


def job_of(name: str, access: Access) -> dict[str, Any]:
    try:
        return data.job_row(db.engine(), name, access)
    except (data.NotFound, OptionError) as exc:
        raise HTTPException(404, str(exc)) from None


def as_json(value: Any) -> JSONResponse:
    """FastAPI's own encoding walks every value of a large plot in Python; dates become ISO-8601 here first."""
    return JSONResponse(jsonable_encoder(value) if not isinstance(value, dict) or "traces" not in value else value)


def create_app() -> FastAPI:
    app = FastAPI(title="streamfill", dependencies=READER, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if request.url.path.startswith(f"{roots(request)[0]}/api/"):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
        return page(request, "error.html", status=exc.status_code, status_code=exc.status_code, detail=exc.detail,
                    login=exc.status_code in (401, 403))

    @app.exception_handler(SQLAlchemyError)
    async def db_error(request: Request, exc: SQLAlchemyError):
        return await http_error(request, HTTPException(503, f"offsets_db did not answer: {str(exc).splitlines()[0]}"))

    @app.exception_handler(StreamfillError)
    async def config_error(request: Request, exc: StreamfillError):
        return await http_error(request, HTTPException(503, str(exc)))

    @app.get("/static/plotly.min.js", include_in_schema=False)
    def plotly_script() -> FileResponse:
        return FileResponse(plotly_js(), media_type="text/javascript",
                            headers={"Cache-Control": "private, max-age=86400"})

    @app.get("/", response_class=HTMLResponse)
    def overview_page(request: Request, access: AccessDep, limit: int = Query(data.OVERVIEW_LIMIT, ge=1, le=100_000)):
        return page(request, "overview.html", **data.overview(db.engine(), roots(request)[1], limit=limit,
                                                              access=access))

    @app.get("/jobs/{job}", response_class=HTMLResponse)
    def job_page(request: Request, job: str, access: AccessDep, window: str | None = None):
        name, length = window_of(window)
        row, engine = job_of(job, access), db.engine()
        lag = data.lag(engine, job, length)
        return page(request, "job.html", job=row, window=name, windows=list(fmt.WINDOWS), lag=lag,
                    throughput=data.throughput(engine, job, length, batches=lag["batches"]),
                    dead_letters=data.dead_letters(engine, row["id"], length, samples=0),
                    data_loss=data.data_loss(engine, row["id"]), quality=data.quality(engine, row["id"], length))

    @app.get("/jobs/{job}/dead-letters", response_class=HTMLResponse)
    def dead_letters_page(request: Request, job: str, access: AccessDep, window: str | None = None):
        name, length = window_of(window)
        row = job_of(job, access)
        return page(request, "dead_letters.html", job=row, window=name, windows=list(fmt.WINDOWS),
                    groups=data.dead_letters(db.engine(), row["id"], length))

    @app.get("/jobs/{job}/find", response_class=HTMLResponse)
    def find_page(request: Request, job: str, access: AccessDep, topic: str | None = None,
                  partition: int | None = None, offset: int | None = None):
        row = job_of(job, access)
        found = None
        if topic and partition is not None and offset is not None:
            found = data.find(db.engine(), row, roots(request)[1], topic, partition, offset)
        return page(request, "find.html", job=row, found=found, topic=topic or "", partition=partition,
                    offset=offset)

    @app.get("/api/jobs")
    def jobs_api(request: Request, access: AccessDep, limit: int = Query(data.OVERVIEW_LIMIT, ge=1, le=100_000)):
        return as_json(data.overview(db.engine(), roots(request)[1], limit=limit, access=access))

    @app.get("/api/jobs/{job}/lag")
    def lag_api(job: str, access: AccessDep, window: str | None = None):
        job_of(job, access)
        return as_json(data.lag(db.engine(), job, window_of(window)[1]))

    @app.get("/api/jobs/{job}/throughput")
    def throughput_api(job: str, access: AccessDep, window: str | None = None):
        job_of(job, access)
        return as_json(data.throughput(db.engine(), job, window_of(window)[1]))

    @app.get("/api/jobs/{job}/dead-letters")
    def dead_letters_api(job: str, access: AccessDep, window: str | None = None):
        return as_json(data.dead_letters(db.engine(), job_of(job, access)["id"], window_of(window)[1]))

    @app.get("/api/jobs/{job}/data-loss")
    def data_loss_api(job: str, access: AccessDep):
        return as_json(data.data_loss(db.engine(), job_of(job, access)["id"]))

    @app.get("/api/jobs/{job}/quality")
    def quality_api(job: str, access: AccessDep, window: str | None = None):
        return as_json(data.quality(db.engine(), job_of(job, access)["id"], window_of(window)[1]))

    @app.get("/api/jobs/{job}/find")
    def find_api(request: Request, job: str, access: AccessDep, topic: str, partition: int, offset: int):
        return as_json(data.find(db.engine(), job_of(job, access), roots(request)[1], topic, partition, offset))

    # the replay form's tasks ask as the streamfill_airflow_api user; what others may trigger is no one else's to see
    @app.get(TRIGGER_ACCESS)
    def trigger_access_api(access: AccessDep, dag_id: str, run_id: str, dag: list[str] = Query([])):
        if not access.reader.reads_every_dag():
            raise HTTPException(403, "only a user who may read the runs of every DAG (the user of the connection "
                                     f"{API_CONNECTION}) may ask who triggered a run and what they may trigger")
        try:
            return as_json(triggers.answer(dag_id, run_id, set(dag)))
        except triggers.NoSuchRun as exc:
            raise HTTPException(404, str(exc)) from None

    return app
