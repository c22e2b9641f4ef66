"""The site's ASGI application (Starlette): routes, templates, errors as pages.

Every route is GET (HEAD too): the site only reads. Pages run in Starlette's thread
pool, as the gRPC client blocks. Answers carry a Content-Security-Policy that allows
nothing from elsewhere and no script at all: the site has none, so markup that slipped
through escaping could not run either.
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
from gpubench.collector.web import metrics, reads, text, views
from grpc_health.v1 import health_pb2, health_pb2_grpc
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpubench import __version__, record
from gpubench.errors import (
    AccessDenied,
    CollectorUnavailable,
    GpubenchError,
    InvalidRecord,
    NotFound,
    RequestRefused,
)

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
                               "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
HEALTH_TIMEOUT_S = 2.0


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
        models=record.MODELS, gpu_url=views.gpu_url, run_url=views.run_url,
        summary=views.run_summary, spread=text.spread, version=__version__,
        config_name=record.gpu_config_name, status_name=record.status_name,
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
        self.app = Starlette(
            routes=[
                Route("/", page("overview", lambda c, r: views.overview(c))),
                Route("/leaderboard/{model}", page(
                    "leaderboard",
                    lambda c, r: views.leaderboard(c, r.path_params["model"], r.query_params))),
                Route("/compare", lambda r: RedirectResponse("/compare/B0", 307)),
                Route("/compare/{model}", page(
                    "compare",
                    lambda c, r: views.comparison(c, r.path_params["model"], r.query_params))),
                Route("/gpu/{name:path}", page(
                    "gpu", lambda c, r: views.gpu(c, r.path_params["name"]))),
                Route("/run/{run_id}", page(
                    "run", lambda c, r: views.run(c, r.path_params["run_id"]))),
                Route("/runs", page("runs", lambda c, r: views.runs(c, r.query_params))),
                Route("/site.css", self._css),
                Route("/healthz", self._healthz),
                Route("/metrics", self._metrics),
            ],
            lifespan=self._lifespan,
            # Every answer carries the security headers, Starlette's own (404, 405) too;
            # a bug's 500 is answered by the handler, past the middleware.
            middleware=[Middleware(SecurityHeaders)],
            exception_handlers={Exception: self._failed},
        )

    # -- pages ------------------------------------------------------------------------

    def _page(self, name: str, view: Callable[[Any, Request], tuple[str, dict]]
              ) -> Callable[[Request], Response]:
        """A route answering `view`'s template, or a page saying what went wrong."""

        def endpoint(request: Request) -> Response:
            started = time.monotonic()
            try:
                visitor = _bearer(request) if self.config.visitor_tokens else None
                client = self.reader.client(visitor)
                template, context = view(client, request)
                status = 200
            except GpubenchError as exc:
                template, context, status = self._error(name, request, exc)
            context.setdefault("page", name)
            context.setdefault("path", request.url.path)
            body = self.env.get_template(template).render(**context)
            self.metrics.observe(name, status, started)
            headers = {"WWW-Authenticate": 'Bearer realm="gpubench"'} if status == 401 else {}
            return HTMLResponse(body, status_code=status, headers=headers)

        return endpoint

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
        elif isinstance(exc, (InvalidRecord, RequestRefused)):
            status, title = 400, "The collector refused the request"
        else:
            status, title = 502, "The collector failed"
            log.warning("collector failed: %s", exc)
        context: dict[str, Any] = {"title": title, "detail": detail, "status": status,
                                   "differences": views.differences(detail)
                                   if status == 409 else []}
        if page == "compare" and status in (400, 404, 409):
            # The comparison page keeps its form, so the reader can pin what differs.
            try:
                model = views.model_of(request.path_params.get("model", "B0"))
                filters = views.Filters.of(request.query_params)
            except InvalidRecord:
                return "error.html", context, status
            context.update(model=model, filters=filters, response=None,
                           baseline=request.query_params.get("baseline", ""),
                           baseline_count=request.query_params.get("count", "1"),
                           choices=filters.choices(any_rule=True, pipeline=True),
                           baselines=[], refusal=context)
            return "compare.html", context, status
        return "error.html", context, status

    def _failed(self, request: Request, exc: Exception) -> Response:
        """A bug's answer: a page saying so (its traceback goes to the log)."""
        body = self.env.get_template("error.html").render(
            title="The site failed", status=500, page="error", path=request.url.path,
            detail="Something went wrong on the site's side; the site's log has the details.")
        return HTMLResponse(body, status_code=500, headers=SECURITY_HEADERS)

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
        return Response(self.metrics.exposition(), media_type=metrics.CONTENT_TYPE)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        self.close()

    def close(self) -> None:
        """Close the site's connections to the collector."""
        self.reader.close()


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
