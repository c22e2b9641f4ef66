"""`gpubench-collector`: serve the collector, manage access tokens, import run records,
back the database up and restore it."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from gpubench import record
from gpubench.cli_vocabulary import HELP_CONTEXT
from gpubench.errors import ExitCode, GpubenchError, RequestRefused, wrap_message
from gpubench.usage import FriendlyGroup, example
from gpubench.versions import DISTRIBUTION, VERSION

err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
out = Console(highlight=False, markup=False, soft_wrap=True)


def default_db() -> Path:
    """$XDG_DATA_HOME/gpubench/collector.duckdb (~/.local/share/... without it)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "gpubench" / "collector.duckdb"


DB_OPTION = click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=default_db,
    show_default="$XDG_DATA_HOME/gpubench/collector.duckdb",
    envvar="GPUBENCH_COLLECTOR_DB",
    help="The DuckDB file holding runs and tokens (env GPUBENCH_COLLECTOR_DB).",
)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# The modules of the web extra (pyproject.toml) the results site imports.
WEB_MODULES = ("starlette", "uvicorn", "jinja2", "markupsafe", "prometheus_client")
# The modules of the collector extra the other commands import (the database's).
COLLECTOR_MODULES = ("duckdb", "pyarrow", "grpc_health", "grpc_reflection",
                     "prometheus_client")


def existing_database(db_path: Path) -> Path:
    """`db_path`, refused where it is the default and no database is there: a token or a
    backup of a new, empty database in the home folder is never what was meant (the
    collector's database is the file `serve --db` names)."""
    source = click.get_current_context().get_parameter_source("db_path")
    if source == click.core.ParameterSource.DEFAULT and not db_path.exists():
        raise GpubenchError(
            f"no collector database at {db_path} (the default): give --db FILE, the file "
            "`gpubench-collector serve --db` serves, or set $GPUBENCH_COLLECTOR_DB "
            "(`serve` makes a new database)", exit_code=ExitCode.USAGE)
    return db_path


class CollectorGroup(FriendlyGroup):
    """Usage errors as the collector's other errors: `gpubench-collector: ...`, wrapped."""

    program = "gpubench-collector"
    prefix = "gpubench-collector: "


@click.group(context_settings=HELP_CONTEXT, cls=CollectorGroup)
@click.version_option(VERSION, prog_name="gpubench-collector")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False),
              default="INFO", show_default=True, envvar="GPUBENCH_LOG_LEVEL",
              help="Least severe log lines shown on stderr (env GPUBENCH_LOG_LEVEL): "
                   "WARNING shows the collector's problems (a trusted proxy it cannot look "
                   "up, writes durable again, ...); ERROR only failures (a full disk, a "
                   "bug).")
def cli(log_level: str) -> None:
    """The gpubench collector: stores benchmark runs and answers comparisons over gRPC."""
    # A service's log: timestamped lines on stderr, where service managers collect them.
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@cli.command(epilog=example('gpubench-collector serve --db /var/lib/gpubench/collector.duckdb'))
@DB_OPTION
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs TLS or --insecure.")
@click.option("--port", default=50051, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: any free port, printed at start).")
@click.option("--public-read", is_flag=True,
              help="Let anyone read runs and comparisons without a token (writes still need one).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="PEM certificate (chain) to serve TLS with; needs --tls-key.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="PEM private key of --tls-cert.")
@click.option("--insecure", is_flag=True,
              help="Allow plaintext on a non-loopback address (tokens travel in clear).")
@click.option("--rate-limit", default=50.0, show_default=True, type=click.FloatRange(min=0),
              help="Submissions per second allowed per token (bursts of as many); 0: no limit.")
@click.option("--max-message-bytes", default=1 << 20, show_default=True,
              type=click.IntRange(min=1024),
              help="Largest request accepted, in bytes (larger ones get RESOURCE_EXHAUSTED).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Also serve /metrics (Prometheus text or OpenMetrics) on this HTTP port "
                   "(0: any free port, printed at start): submissions, refusals by reason, "
                   "runs stored and flagged. Off unless given.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address /metrics listens on; the figures need no token, so keep it to "
                   "the operators' network.")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDRESS",
              help="A proxy in front of the collector (docker/edge): an address, a network "
                   "(CIDR) or a host name; repeat for more. Calls from it are counted by "
                   "the client address in its x-forwarded-for (failed authentications are "
                   "limited per client); from any other peer that header is ignored.")
def serve(
    db_path: Path, host: str, port: int, public_read: bool, tls_cert: Path | None,
    tls_key: Path | None, insecure: bool, rate_limit: float, max_message_bytes: int,
    metrics_port: int | None, metrics_host: str, trusted_proxies: tuple[str, ...],
) -> None:
    """Serve the collector until SIGTERM or Ctrl-C, then stop gracefully.

    One process: a submission is acknowledged once its DuckDB commit has returned.
    Commands on this machine (token, backup, import) reach it through a Unix socket in
    DB.admin/, a folder only its owner can enter. A public collector belongs behind a
    proxy (docker/compose.yaml)."""
    from gpubench.collector.server import TlsFiles
    from gpubench.collector.server import serve as run_server

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    tls = TlsFiles(tls_cert, tls_key) if tls_cert and tls_key else None

    def ready(address: str) -> None:
        mode = "TLS" if tls else "plaintext"
        reads = "public" if public_read else "token"
        # The address first: scripts find it on the first line, however the path wraps.
        out.print(wrap_message("", f"collector serving on {address} ({mode}, reads: "
                               f"{reads}), the database {db_path}"))
        sys.stdout.flush()

    def metrics_ready(bound: int) -> None:
        shown = f"[{metrics_host}]" if ":" in metrics_host else metrics_host
        out.print(f"metrics on http://{shown}:{bound}/metrics")
        sys.stdout.flush()

    run_server(
        db_path, host=host, port=port, public_read=public_read, tls=tls, insecure=insecure,
        rate_limit=rate_limit, max_message_bytes=max_message_bytes, on_ready=ready,
        metrics=(metrics_host, metrics_port) if metrics_port is not None else None,
        on_metrics=metrics_ready, trusted_proxies=trusted_proxies,
    )
    err.print("collector stopped")


@cli.command(epilog=example('gpubench-collector web --collector 127.0.0.1:50051 --port 8080'))
@click.option("--collector", "address", envvar="GPUBENCH_COLLECTOR", default="127.0.0.1:50051",
              show_default=True,
              help="The collector's gRPC address (env GPUBENCH_COLLECTOR); the site reads "
                   "through its API only, never its database.")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A file holding the token the site reads with, for a collector without "
                   "--public-read (env GPUBENCH_TOKEN also works); give the site a token of "
                   "its own, not an admin token.")
@click.option("--visitor-tokens", is_flag=True,
              help="Read with the token a request carries (Authorization: Bearer) when it "
                   "carries one, for a site only token holders reach. Wrong tokens count "
                   "against the collector's limit of failed authentications for the site's "
                   "address: past it, wrong tokens are refused for a while "
                   "(RESOURCE_EXHAUSTED), never valid ones or the site's own reads.")
@click.option("--ca", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="PEM certificate to trust for a collector serving TLS.")
@click.option("--tls", is_flag=True, help="Reach the collector over TLS with the system's roots.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address the site listens on (HTTP; put TLS in front of it in a proxy).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port the site listens on (0: any free port, printed at start).")
@click.option("--timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds a page waits for the collector.")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="uvicorn's log level; info logs every request.")
def web(address: str, token_file: Path | None, visitor_tokens: bool, ca: Path | None,
        tls: bool, host: str, port: int, timeout: float, log_level: str) -> None:
    """Serve the read-only results site: leaderboards, comparisons, will it fit, how long
    and what it costs, a page per GPU and per run, downloads (CSV, JSON, Parquet),
    /metrics (Prometheus) and /healthz, as a client of the collector's gRPC API."""
    try:
        from gpubench.collector.web.reads import SiteConfig
        from gpubench.collector.web.server import serve as serve_site
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in WEB_MODULES:
            raise
        raise GpubenchError(
            f"the results site needs the web extra, which is not installed (no module "
            f"{exc.name!r}): pip install '{DISTRIBUTION}[web]'", exit_code=ExitCode.USAGE) from None

    token = token_file.read_text().strip() if token_file else os.environ.get("GPUBENCH_TOKEN")
    config = SiteConfig(address=address, token=token or None, visitor_tokens=visitor_tokens,
                        ca=ca, tls=tls, timeout=timeout)

    def ready(url: str) -> None:
        reads = "with a token" if config.token else "without a token"
        if visitor_tokens:
            reads += ", or the visitor's"
        # The address first: scripts find it on the first line, however the rest wraps.
        out.print(wrap_message("", f"results site on {url}, reading the collector at "
                               f"{address} {reads}"))
        sys.stdout.flush()

    # Until SIGTERM or Ctrl-C: uvicorn finishes the requests in flight, then exits.
    serve_site(config, host=host, port=port, log_level=log_level, on_ready=ready)


@contextlib.contextmanager
def _local_or_live(db_path: Path, local: Callable[[Any], object]) -> Iterator[object]:
    """`local` of the store of `db_path` opened here, or, while a collector holds the file,
    that collector (collector.local_admin.LiveCollector, which has the same methods)."""
    from gpubench.collector.errors import DatabaseLocked
    from gpubench.collector.local_admin import LiveCollector
    from gpubench.collector.store import Store

    try:
        store = Store(db_path)
    except DatabaseLocked:
        with LiveCollector.for_database(db_path) as live:
            yield live
        return
    try:
        yield local(store)
    finally:
        store.close()


def _token_book(db_path: Path) -> contextlib.AbstractContextManager[object]:
    """The tokens of `db_path`: directly, or through the collector that holds the file."""
    from gpubench.collector.auth import TokenBook

    return _local_or_live(db_path, TokenBook)


def _which_database(db_path: Path, book: object) -> str:
    """'the database PATH' for the token commands' lines: a token works only at a
    collector serving that file, so the default is said as such."""
    from gpubench.collector.local_admin import LiveCollector

    where = f"the database {db_path}"
    source = click.get_current_context().get_parameter_source("db_path")
    if source == click.core.ParameterSource.ENVIRONMENT:
        where += " (from $GPUBENCH_COLLECTOR_DB)"
    elif source != click.core.ParameterSource.COMMANDLINE:
        where += " (the default; --db or $GPUBENCH_COLLECTOR_DB names another)"
    if isinstance(book, LiveCollector):
        where += ", through the collector serving it"
    return where


def _note(message: str) -> None:
    """One message on stderr, wrapped at 80 columns."""
    err.print(wrap_message("", message))


@cli.group()
def token() -> None:
    """Create, list and revoke access tokens (works while the collector runs)."""


@token.command("create", epilog=example('gpubench-collector token create alice'))
@DB_OPTION
@click.argument("name")
@click.option("--admin", is_flag=True, help="May administer tokens and delete anyone's runs.")
def token_create(db_path: Path, name: str, admin: bool) -> None:
    """Create token NAME and print its secret (shown this once; only a hash is kept)."""
    existing_database(db_path)
    with _token_book(db_path) as book:
        row, secret = book.create(name, admin=admin)  # type: ignore[attr-defined]
    kind = "admin token" if row.admin else "token"
    _note(f"created {kind} {row.name!r} in {_which_database(db_path, book)}: it works at a "
          "collector serving that file")
    err.print("store the secret now, it is not shown again:")
    click.echo(secret)


@token.command("list", epilog=example('gpubench-collector token list'))
@DB_OPTION
def token_list(db_path: Path) -> None:
    """List tokens: name, admin, created, last used, revoked."""
    existing_database(db_path)
    with _token_book(db_path) as book:
        rows = book.list()  # type: ignore[attr-defined]
    _note(f"{len(rows)} token(s) in {_which_database(db_path, book)}")
    table = Table("name", "admin", "created (UTC)", "last used (UTC)", "revoked")
    for row in rows:
        table.add_row(
            row.name,
            "yes" if row.admin else "",
            row.created_at.strftime("%Y-%m-%d %H:%M"),
            row.last_used_at.strftime("%Y-%m-%d %H:%M") if row.last_used_at else "never",
            "revoked" if row.revoked else "",
        )
    out.print(table)


@token.command("revoke", epilog=example('gpubench-collector token revoke alice'))
@DB_OPTION
@click.argument("name")
def token_revoke(db_path: Path, name: str) -> None:
    """Revoke token NAME: calls with it are refused from now on."""
    existing_database(db_path)
    with _token_book(db_path) as book:
        row = book.revoke(name)  # type: ignore[attr-defined]
    _note(f"revoked token {row.name!r} in {_which_database(db_path, book)}")


@cli.command("import",
             epilog=example("gpubench-collector import --db collector.duckdb "
                            "docs/results/runs/*.json"))
@DB_OPTION
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--submitter", default="import", show_default=True,
              help="The submitter name the imported runs carry (direct import only).")
def import_runs(db_path: Path, files: tuple[Path, ...], submitter: str) -> None:
    """Load run records (JSON files as the agent spools them), validated like submissions.

    Runs already stored with the same content are skipped; a run_id stored with other
    content is an error. All files are checked before anything is stored.
    """
    from gpubench.collector import validation

    runs = []
    for path in files:
        run = record.from_json(path.read_text(), source=str(path))
        try:
            # The operator's import: published records (Run.published) are welcome here.
            validation.validate(run, may_publish=True)
        except validation.InvalidRun as exc:
            raise RequestRefused(f"{path}: {exc}", exit_code=ExitCode.BAD_DATA) from exc
        runs.append(run)
    with _local_or_live(db_path, lambda store: store) as target:
        results = target.submit_many(runs, submitter)  # type: ignore[attr-defined]
    conflicts = [str(r) for r in results if isinstance(r, Exception)]
    _note(f"{len(runs) - len(conflicts)} run(s) stored in {_which_database(db_path, target)} "
          "(runs already there with the same content are left as they were)")
    if conflicts:
        raise RequestRefused("; ".join(conflicts[:3]))


@cli.command("backup", epilog=example('gpubench-collector backup /backups/2026-12-01'))
@DB_OPTION
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
def backup_command(db_path: Path, folder: Path) -> None:
    """Copy the database into FOLDER (new, or empty): every run acknowledged so far and
    the tokens, as Parquet files with a manifest of their SHA-256, signed with the
    collector's backup key (PATH.backup-key beside the database, made at the first
    backup: keep a copy of it apart from the backups, `restore` needs it).
    Works while the collector serves: it then writes the copy itself, from one
    snapshot, while submissions go on."""
    from gpubench.collector import backup
    from gpubench.collector.local_admin import LiveCollector

    folder = folder.resolve()  # the serving collector's working folder may differ
    existing_database(db_path)
    if not db_path.exists():
        raise GpubenchError(f"{db_path}: no such database", exit_code=ExitCode.BAD_DATA)
    had_key = backup.key_path(db_path).exists()
    with _local_or_live(db_path, lambda store: store) as target:
        # The live collector writes the copy itself (only it can read the file now).
        taken = target.backup(folder) if isinstance(target, LiveCollector) \
            else backup.take(target, folder)  # type: ignore[arg-type]
    _note(f"backed up {taken.runs} run(s) and {taken.tokens} token(s) into {folder}")
    key = backup.key_path(db_path)
    if not had_key:
        _note(f"signed with a new backup key, {key}: keep a copy of it apart from the "
              "backups; `restore --key` needs it")


@cli.command("restore",
             epilog=example("gpubench-collector restore /backups/1 --db new.duckdb "
                            "--key old.backup-key"))
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--db", "db_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The new database file to make from the backup; refused if a database "
                   "is there (its file or PATH.wal), unless --force.")
@click.option("--key", "key", required=True, envvar="GPUBENCH_BACKUP_KEY",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The backup key the backup was signed with: the file DB.backup-key beside "
                   "the database of the collector that took it (env GPUBENCH_BACKUP_KEY).")
@click.option("--force", is_flag=True,
              help="Replace the database at --db once the restore has succeeded (never one a "
                   "running collector holds).")
def restore_command(folder: Path, db_path: Path, key: Path, force: bool) -> None:
    """Make a database from the backup in FOLDER (written by `backup`), once its signature
    and every file's SHA-256 check out with --key; the schema comes from this gpubench,
    each run again from its record, and the counts must match the backup's. A restore
    that fails leaves no database. Then serve it with `serve --db PATH`."""
    from gpubench.collector import backup

    manifest = backup.restore(folder, db_path, key=key, replace=force)
    _note(f"restored {manifest.runs} run(s) and {manifest.tokens} token(s) into "
          f"{db_path} (backup of {manifest.created_at})")


def main(argv: list[str] | None = None) -> None:
    """Entry point: user-facing errors are one line and their exit code."""
    try:
        cli.main(args=argv, prog_name="gpubench-collector", standalone_mode=False)
    except GpubenchError as exc:
        err.print(wrap_message("gpubench-collector: ", str(exc)))
        sys.exit(exc.exit_code)
    except ModuleNotFoundError as exc:
        # Installed without the collector extra (README's agent install, say).
        if (exc.name or "").partition(".")[0] not in COLLECTOR_MODULES:
            raise
        err.print(wrap_message("gpubench-collector: ", (
            f"the collector needs the collector extra, which is not installed (no module "
            f"{exc.name!r}): pip install '{DISTRIBUTION}[collector]'")))
        sys.exit(ExitCode.USAGE)
    except click.exceptions.Abort:
        err.print("gpubench-collector: interrupted")
        sys.exit(ExitCode.INTERRUPTED)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
