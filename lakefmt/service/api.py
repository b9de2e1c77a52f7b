"""The HTTP API of ``lakefmt serve`` (spec/service.md §HTTP API, SERVICE-9..SERVICE-19).

:func:`create_app` builds a FastAPI application over a running
:class:`~lakefmt.service.daemon.CompactionService`. Routes under ``/api/v1``, ``/catalog/v1``
(the catalog over HTTP, :mod:`lakefmt.service.catalog_api`) and ``/metrics`` need
``Authorization: Bearer <token>`` when a token is configured (SERVICE-10); ``/``, ``/healthz``, ``/openapi.json`` and ``/docs`` never do. ``/docs`` is
Swagger UI served from the installed ``swagger-ui-bundle`` package under ``/docs/assets``,
so it works without internet access (SERVICE-19). The response
bodies are the pydantic models of :mod:`lakefmt.service.models`, so the OpenAPI
document served at ``/openapi.json`` describes every answer, errors included.

Example:
    $ curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8765/api/v1/status
    $ curl -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \\
           -d '{"table": "artemis.downlinks"}' http://127.0.0.1:8765/api/v1/trigger
"""

# No `from __future__ import annotations` here: FastAPI reads the annotations of the route
# functions at runtime, and some refer to objects local to create_app (the bearer scheme).
import hmac
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from lakefmt import __version__
from lakefmt.catalog import parse_identifier
from lakefmt.errors import InvalidNameError, NoSuchTableError, ValidationError
from lakefmt.service import models as m
from lakefmt.service.catalog_api import catalog_router
from lakefmt.service.config import JOB_KINDS
from lakefmt.service.daemon import CompactionService, ServiceStoppingError
from lakefmt.service.jobs import iso
from lakefmt.service.metrics import CONTENT_TYPE, counter_total
from lakefmt.service.tasks import candidates, health

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": m.ErrorBody, "description": "Missing or wrong bearer token"},
    422: {"model": m.ErrorBody, "description": "Invalid parameters"},
}
TABLE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS, 404: {"model": m.ErrorBody, "description": "No such table"}}
DOCS_ASSETS = "/docs/assets"  # Swagger UI's JavaScript and CSS, from the swagger-ui-bundle package
TableQuery = Annotated[str | None, Query(pattern=m.TABLE_PATTERN, description="namespace.table (default: all)")]


def _query_names(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def reject_unknown_query(request: Request) -> None:
    """A query parameter the route does not declare is an error, not silently ignored (SERVICE-9)."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    unknown = sorted(set(request.query_params.keys()) - _query_names(dependant))
    if unknown:
        raise HTTPException(422, f"unknown query parameter(s): {', '.join(map(repr, unknown))}")


class CountRequests:
    """ASGI middleware counting the answered requests by method, route and status (``lakefmt_service_http_requests_total``).

    Written as plain ASGI rather than with ``@app.middleware("http")``: Starlette's
    ``BaseHTTPMiddleware`` runs each request in a task group and streams the answer through a
    memory channel, which was ~15% of the catalog server's CPU per commit (py-spy, 4 writers).
    A request that fails inside the application is counted with status 500.
    """

    def __init__(self, app: Any, counter: Any) -> None:
        self.app, self.counter = app, counter

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.counter.labels(method=scope["method"], route=route, status=str(status)).inc()


def create_app(service: CompactionService) -> FastAPI:
    """The FastAPI application serving ``service``."""
    app = FastAPI(title="lakefmt compaction service", version=__version__,
                  description="Scheduled compaction and maintenance of a lakefmt warehouse (spec/service.md).",
                  dependencies=[Depends(reject_unknown_query)], docs_url=None, redoc_url=None)
    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")
    bearer = HTTPBearer(auto_error=False, description="The token of [service] token / LAKEFMT_SERVICE_TOKEN")
    metrics = service.metrics

    def authorize(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        token = service.config.token
        if token is None:  # no token configured (SERVICE-10); an empty one is refused at start (SERVICE-29)
            return
        given = credentials.credentials if credentials is not None else ""
        if not hmac.compare_digest(given.encode(), token.encode()):  # SERVICE-10: constant time
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    auth = [Depends(authorize)]

    app.add_middleware(CountRequests, counter=metrics.http_requests)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return JSONResponse({"detail": problems or "invalid request"}, status_code=422)

    @app.exception_handler(NoSuchTableError)
    async def no_such_table(_request: Request, exc: NoSuchTableError) -> JSONResponse:
        return JSONResponse({"detail": str(exc.args[0] if exc.args else exc)}, status_code=404)

    @app.exception_handler(ServiceStoppingError)
    async def stopping(_request: Request, exc: ServiceStoppingError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.exception_handler(ValidationError)
    async def invalid(_request: Request, exc: ValidationError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    def check_table(table: str | None) -> str | None:
        if table is not None:
            try:
                parse_identifier(table)
            except InvalidNameError as exc:
                raise HTTPException(422, str(exc)) from None
        return table

    def tables_for(table: str | None) -> list[str]:
        if table is None:
            return service.tables()
        if not service.catalog.table_exists(table):
            raise NoSuchTableError(f"table {table} does not exist")
        return [table]

    def job_model(record: Any, *, details: bool = True) -> m.Job:
        return m.Job(**record.to_dict(details=details))

    @app.get("/", response_model=m.Root, tags=["service"], responses={422: ERRORS[422]})
    def root() -> m.Root:
        return m.Root(service="lakefmt", version=__version__, docs="/docs", openapi="/openapi.json",
                      api="/api/v1", metrics="/metrics")

    @app.get("/docs", include_in_schema=False, response_class=HTMLResponse)
    def docs() -> HTMLResponse:
        """Swagger UI with local assets: no CDN, so the page works offline (SERVICE-19)."""
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - API",
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png")

    @app.get("/healthz", response_model=m.Liveness, tags=["service"],
             responses={503: {"model": m.Liveness, "description": "Shutting down"}, 422: ERRORS[422]})
    def healthz() -> Any:
        if service.stopping:
            return JSONResponse({"status": "stopping"}, status_code=503)
        return m.Liveness(status="ok")

    @app.get("/metrics", response_class=Response, dependencies=auth, tags=["service"],
             responses={401: {"model": m.ErrorBody, "description": "Missing or wrong bearer token",
                              "content": {"application/json": {}}},
                        422: {"model": m.ErrorBody, "description": "Unknown query parameter",
                              "content": {"application/json": {}}},
                        200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text format 0.0.4"}})
    def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/api/v1/status", response_model=m.Status, dependencies=auth, responses=ERRORS, tags=["compaction"])
    def status() -> m.Status:
        config = service.config
        schedules: dict[str, m.Schedule] = {}
        for kind in JOB_KINDS:
            last = service.store.last(kind)
            next_run = service.scheduler.next_run(kind)
            schedules[kind] = m.Schedule(enabled=config.job(kind).enabled, schedule=config.job(kind).schedule,
                                         next_run=next_run.isoformat() if next_run else None,
                                         last_run=iso(last.started_us) if last else None,
                                         last_status=last.status if last else None)
        mine = service.running_jobs()
        return m.Status(
            instance_id=service.instance_id, version=__version__, warehouse=service.catalog.warehouse,
            started_at=iso(service.started_us), enabled=config.compaction.enabled,
            running=any(r.status == "running" for r in mine),
            jobs_running=sum(1 for r in mine if r.status == "running"),
            jobs_queued=sum(1 for r in mine if r.status == "queued"),
            last_run=schedules["compaction"].last_run, next_run=schedules["compaction"].next_run,
            schedules=schedules, stats=m.Totals(**service.store.totals("compaction")),
            instances=[m.Instance(**i.to_dict()) for i in service.store.instances(
                live_within_us=int(max(6 * config.heartbeat_seconds, 30.0) * 1_000_000))])

    @app.get("/api/v1/stats", response_model=m.Stats, dependencies=auth, responses=ERRORS, tags=["compaction"])
    def stats() -> m.Stats:
        return m.Stats(all=m.Totals(**service.store.totals()),
                       by_kind={k: m.Totals(**service.store.totals(k)) for k in JOB_KINDS},
                       since_start={name: int(counter_total(getattr(metrics, name))) for name in (
                           "files_rewritten", "files_written", "bytes_rewritten", "bytes_written",
                           "groups_committed", "conflicts")})

    @app.get("/api/v1/candidates", response_model=m.Candidates, dependencies=auth, responses=TABLE_ERRORS,
             tags=["compaction"])
    def list_candidates(table: TableQuery = None) -> m.Candidates:
        out: list[m.Candidate] = []
        for name in tables_for(check_table(table)):
            try:
                out += [m.Candidate(**c) for c in candidates(service.catalog.load_table(name), service.config)]
            except NoSuchTableError:
                if table is not None:
                    raise
        return m.Candidates(candidates=out, total_candidates=sum(1 for c in out if c.eligible),
                            total_partitions=len(out))

    @app.get("/api/v1/health", response_model=m.Health, dependencies=auth, responses=TABLE_ERRORS,
             tags=["tables"])
    def table_health(table: TableQuery = None) -> m.Health:
        out = []
        for name in tables_for(check_table(table)):
            try:
                out.append(m.TableHealth(**health(service.catalog.load_table(name), service.config)))
            except NoSuchTableError:
                if table is not None:
                    raise
        return m.Health(tables=out)

    @app.post("/api/v1/trigger", response_model=m.Job, status_code=202, dependencies=auth, tags=["compaction"],
              responses={**TABLE_ERRORS, 400: {"model": m.ErrorBody, "description": "The body is not JSON"},
                         503: {"model": m.ErrorBody, "description": "Shutting down"}})
    def trigger(body: m.TriggerRequest | None = None) -> m.Job:
        body = body or m.TriggerRequest.model_validate({})
        record = service.trigger(body.kind, table=check_table(body.table), respect_windows=body.respect_windows)
        return job_model(record)

    @app.get("/api/v1/jobs", response_model=m.Jobs, dependencies=auth, responses=ERRORS, tags=["jobs"])
    def active_jobs() -> m.Jobs:
        return m.Jobs(jobs=[job_model(r) for r in service.active_jobs()])

    job_path = Path(description="a job id", pattern=r"^[0-9a-f]{32}$")

    @app.get("/api/v1/jobs/{job_id}", response_model=m.Job, dependencies=auth, tags=["jobs"],
             responses={**ERRORS, 404: {"model": m.ErrorBody, "description": "No such job"}})
    def get_job(job_id: Annotated[str, job_path]) -> m.Job:
        record = service.job(job_id)
        if record is None:
            raise HTTPException(404, f"no job {job_id}")
        return job_model(record)

    @app.post("/api/v1/jobs/{job_id}/cancel", response_model=m.Job, dependencies=auth, tags=["jobs"],
              responses={**ERRORS, 404: {"model": m.ErrorBody, "description": "No such job"},
                         409: {"model": m.ErrorBody, "description": "The job is finished or runs elsewhere"}})
    def cancel_job(job_id: Annotated[str, job_path]) -> m.Job:
        record = service.cancel(job_id)
        if record is None:
            existing = service.store.get(job_id)
            if existing is None:
                raise HTTPException(404, f"no job {job_id}")
            raise HTTPException(409, f"job {job_id} is {existing.status} and not running in this instance")
        return job_model(record)

    @app.get("/api/v1/history", response_model=m.History, dependencies=auth, responses=TABLE_ERRORS,
             tags=["jobs"])
    def history(limit: Annotated[int, Query(ge=1, le=1000)] = 50,
                offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
                table: TableQuery = None,
                kind: m.KindParam = None, status: m.StatusParam = None, details: bool = True) -> m.History:
        limit = min(limit, service.config.history_limit)
        records = service.store.history(limit=limit, offset=offset, table=check_table(table), kind=kind,
                                        status=status)
        return m.History(jobs=[job_model(r, details=details) for r in records], limit=limit, offset=offset)

    app.include_router(catalog_router(service.catalog, auth, metrics))  # the catalog over HTTP (spec/catalog-http.md)
    return app
