"""The site's ASGI application (Starlette): routes, templates, errors as pages.

Every route is GET (HEAD too): the site only reads. Pages run in Starlette's thread
pool, as the gRPC client blocks. Answers carry a Content-Security-Policy that allows
nothing from elsewhere and no script at all: the site has none, so markup that slipped
through escaping could not run either.

Every page that shows data answers `?format=json` too (its JSON twin: what the CLI's
`--format json` prints for the same question), and every list `?format=csv` and
`?format=parquet` (downloads, with the comparison key on every row; CSV cells a
spreadsheet would run as a formula neutralised).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import jinja2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpubench import figures, frames, models, record
from gpubench.collector.web import lists, metrics, reads, text, views
from gpubench.errors import (
    AccessDenied,
    CollectorUnavailable,
    GpubenchError,
    InvalidRecord,
    NotFound,
    RequestRefused,
)
from gpubench.versions import VERSION

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
                               "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
HEALTH_TIMEOUT_S = 2.0
# What a page answers in besides HTML (`?format=`), and as what.
FORMATS = {"json": "application/json", "csv": "text/csv; charset=utf-8",
           "parquet": "application/vnd.apache.parquet"}


def templates() -> jinja2.Environment:
    """The site's Jinja environment: autoescaped, every printed value through
    text.finalize (visible escapes for hidden characters), undefined names an error."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=jinja2.select_autoescape(["html", "svg"]),
        finalize=text.finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(text.FILTERS)
    env.globals.update(
        models=models.STANDARD_MODELS, gpu_url=views.gpu_url, run_url=views.run_url,
        summary=views.summary_of, spread=text.SPREAD, version=VERSION,
        config_name=record.gpu_config_name, status_name=record.status_name,
        memory=text.memory, url_with=lists.url_with, figures=figures,
    )
    return env


def _bearer(request: Request) -> str | None:
    """The token a request carries (`Authorization: Bearer ...`), if any."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class Site:
    """The application and what its pages share: the reader, templates, metrics."""

    def __init__(self, config: reads.SiteConfig) -> None:
        self.config = config
        self.reader = reads.Reader(config)
        self.env = templates()
        self.metrics = metrics.SiteMetrics()
        self._health_channel: grpc.Channel | None = None
        self.metrics.add_source(self._collector_metrics)
        page = self._page

        def per_model(name: str, view: Callable[..., views.Answer], first: str) -> list[Route]:
            """/NAME/{model} answering `view`, and /NAME sending to the model `first`."""
            return [Route(f"/{name}", _redirect(f"/{name}/{first}")),
                    Route(f"/{name}/{{model}}", page(name, lambda c, r: view(
                        c, r.path_params["model"], r.query_params, r.url.path)))]

        self.app = Starlette(
            routes=[
                Route("/", page("overview", lambda c, r: views.overview(c, r.query_params))),
                *per_model("leaderboard", views.leaderboard, "B0"),
                *per_model("compare", views.comparison, "B0"),
                *per_model("cost", views.cost, "B7"),
                *per_model("fit", views.fit, "B7"),
                *per_model("estimate", views.estimate, "B7"),
                Route("/gpu/{name:path}", page("gpu", lambda c, r: views.gpu(
                    c, r.path_params["name"], r.query_params, r.url.path))),
                Route("/run/{run_id}", page("run", lambda c, r: views.run(
                    c, r.path_params["run_id"], r.query_params, r.url.path))),
                Route("/runs", page("runs", lambda c, r: views.runs(
                    c, r.query_params, r.url.path, format=_format(r)))),
                Route("/site.css", self._css),
                Route("/healthz", self._healthz),
                Route("/metrics", self._metrics),
            ],
            lifespan=self._lifespan,
            # Every answer carries the security headers, Starlette's own (404, 405) too;
            # a bug's 500 is answered by the handler, past the middleware.
            middleware=[Middleware(SecurityHeaders)],
            # Starlette types every handler as taking any Exception; a 404's gets an
            # HTTPException.
            exception_handlers={404: self._not_found,  # type: ignore[dict-item]
                                Exception: self._failed},
        )

    # -- pages ------------------------------------------------------------------------

    def _page(self, name: str, view: Callable[[Any, Request], views.Answer]
              ) -> Callable[[Request], Response]:
        """A route answering `view`'s page (or its JSON twin, or a download), or a page
        saying what went wrong."""

        def endpoint(request: Request) -> Response:
            started = time.monotonic()
            wanted = _format(request)
            try:
                if wanted and wanted not in FORMATS:
                    raise InvalidRecord("format", f"unknown {wanted[:16]!r} (one of html, "
                                                  f"{', '.join(FORMATS)})")
                visitor = _bearer(request) if self.config.visitor_tokens else None
                client = self.reader.client(visitor)
                answer = view(client, request)
                if wanted and wanted not in answer.formats:
                    raise NotFound(f"this page has no {wanted} form (it has: "
                                   f"{', '.join(('html', *answer.formats))})")
            except GpubenchError as exc:
                template, context, status = self._error(name, request, exc)
                self.metrics.observe(name, status, started)
                if wanted in FORMATS:
                    return JSONResponse({"error": context["title"], "detail": context["detail"],
                                         "status": status}, status_code=status,
                                        headers=self._headers(status))
                return self._render(template, context, request, name, status)
            self.metrics.observe(name, 200, started)
            if wanted:
                return self._data(answer, wanted)
            answer.context["downloads"] = [
                (shown, lists.url_with(request.url.path, request.query_params, format=shown,
                                       start=None, page=None))
                for shown in answer.formats]
            return self._render(answer.template, answer.context, request, name, 200)

        return endpoint

    def _headers(self, status: int) -> dict[str, str]:
        headers = dict(SECURITY_HEADERS)
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="gpubench"'
        return headers

    def _render(self, template: str, context: dict[str, Any], request: Request, name: str,
                status: int) -> Response:
        context.setdefault("page_name", name)
        context.setdefault("path", request.url.path)
        context.setdefault("query", dict(request.query_params))
        context.setdefault("downloads", [])
        body = self.env.get_template(template).render(**context)
        return HTMLResponse(body, status_code=status, headers=self._headers(status))

    def _data(self, answer: views.Answer, wanted: str) -> Response:
        """A page's JSON twin, or a download of its list."""
        headers = dict(SECURITY_HEADERS)
        if wanted == "json":
            document = answer.document if answer.document is not None else \
                frames.frame_records(answer.data_frame())
            return JSONResponse(document, headers=headers)
        frame = answer.data_frame()
        headers["Content-Disposition"] = f'attachment; filename="{answer.name}.{wanted}"'
        body: bytes | str = frames.csv_text(frame) if wanted == "csv" else \
            frames.parquet_bytes(frame)
        return Response(body, media_type=FORMATS[wanted], headers=headers)

    def _not_found(self, request: Request, exc: HTTPException) -> Response:
        """Every address the site has no page for: a page that says so (404)."""
        context = {"title": "Not found", "status": 404,
                   "detail": "The site has no page at this address.", "differences": []}
        self.metrics.observe("none", 404, time.monotonic())
        return self._render("error.html", context, request, "none", 404)

    def _error(self, page: str, request: Request, exc: GpubenchError
               ) -> tuple[str, dict[str, Any], int]:
        """The page for a refusal: the collector's own words (its detail, not our
        address for it) and the HTTP status that fits."""
        code = getattr(exc, "status_code", "")
        if code:
            self.metrics.collector_refusals.labels(code=code).inc()
        detail = getattr(exc, "detail", "") or str(exc)
        if isinstance(exc, AccessDenied):
            status, title = 401, "This collector needs a token to read"
            detail = ("The collector lets only token holders read its runs, and did not "
                      "accept the site's: start the site with a token (--token-file). "
                      "The collector said: " + detail)
        elif isinstance(exc, NotFound):
            status, title = 404, "Not found"
        elif isinstance(exc, CollectorUnavailable):
            status, title = 503, "The collector does not answer"
            detail = "The site cannot reach its collector just now; try again shortly."
            log.warning("collector unavailable: %s", exc)
        elif code == "FAILED_PRECONDITION":
            status, title = 409, "The collector refuses to compare these runs"
        elif code == "RESOURCE_EXHAUSTED":  # a limit: too many wrong tokens from here
            status, title = 429, "Too many requests"
        elif isinstance(exc, (InvalidRecord, RequestRefused)) and code:
            status, title = 400, "The collector refused the request"
        elif not code:  # the site's own reading of the request: a field, a price, a size
            status, title = 400, "The page cannot answer this request"
        else:
            status, title = 502, "The collector failed"
            log.warning("collector failed: %s", exc)
        context: dict[str, Any] = {"title": title, "detail": detail, "status": status,
                                   "differences": views.differences(exc)
                                   if status == 409 else []}
        if page in ("compare", "cost") and status in (400, 404, 409):
            # The comparison page keeps its form, so the reader can pin what differs.
            try:
                model = views.model_of(request.path_params.get("model", "B0"))
                form = views.comparison_context(model, request.query_params, request.url.path)
            except GpubenchError:
                return "error.html", context, status
            context.update(form, response=None, refusal=context)
            return "compare.html", context, status
        return "error.html", context, status

    def _failed(self, request: Request, exc: Exception) -> Response:
        """A bug's answer: a page saying so (its traceback goes to the log)."""
        context = {"title": "The site failed", "status": 500, "differences": [],
                   "detail": "Something went wrong on the site's side; the site's log has "
                             "the details."}
        return self._render("error.html", context, request, "error", 500)

    def _css(self, request: Request) -> Response:
        return Response((HERE / "templates" / "site.css").read_bytes(), media_type="text/css",
                        headers={"Cache-Control": "max-age=300"})

    # -- operators --------------------------------------------------------------------

    def _health(self) -> tuple[bool, str]:
        """Whether the collector's health service says SERVING, and what it said."""
        if self._health_channel is None:
            client = self.reader.client()
            self._health_channel = client._channel  # noqa: SLF001 - the same connection
        stub = health_pb2_grpc.HealthStub(self._health_channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(service=""),
                                timeout=HEALTH_TIMEOUT_S)
        except grpc.RpcError as exc:
            return False, f"collector health check failed: {exc.code().name}"
        serving = answer.status == health_pb2.HealthCheckResponse.SERVING
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
        return serving, f"collector {name}"

    def _healthz(self, request: Request) -> Response:
        serving, said = self._health()
        return PlainTextResponse(f"{'ok' if serving else 'unhealthy'}: {said}\n",
                                 status_code=200 if serving else 503)

    def _collector_metrics(self) -> list[Any]:
        serving, _ = self._health()
        stats = None
        if serving:
            try:
                stats = self.reader.client().stats()
            except GpubenchError as exc:  # a collector older than Stats, or no token
                log.debug("no collector stats: %s", exc)
        return metrics.collector_families(serving, stats)

    def _metrics(self, request: Request) -> Response:
        body, content_type = self.metrics.exposition(request.headers.get("accept", ""))
        return Response(body, media_type=content_type)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        self.close()

    def close(self) -> None:
        """Close the site's connections to the collector."""
        self.reader.close()


def _format(request: Request) -> str:
    """The format a request asks for (`?format=`), "" for the page itself."""
    wanted = request.query_params.get("format", "")
    return "" if wanted == "html" else wanted


def _redirect(target: str) -> Callable[[Request], Response]:
    """A route sending its request, query and all, to `target` (a model's page)."""

    def endpoint(request: Request) -> Response:
        query = request.url.query
        return RedirectResponse(target + (f"?{query}" if query else ""), 307)

    return endpoint


class SecurityHeaders:
    """ASGI middleware: SECURITY_HEADERS on every answer that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, sending)


def create_app(config: reads.SiteConfig) -> Starlette:
    """The site's ASGI application for the collector `config` names."""
    return Site(config).app
