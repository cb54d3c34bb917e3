"""The ``palimpsest`` command line: the process commands here (``init-db``, ``demo``, ``relay``,
``project``, ``pipeline``, ``rebuild``, ``status``, ``bench``), each a thin call into its main in
:mod:`services.entrypoints`; the others in this package's modules, registered on :data:`cli`.

Most commands are clients of a running server (:mod:`services.entrypoints.cli.remote`); the local
ones open the database themselves, say so in their help, and refuse a data folder that holds no
database instead of making one (:mod:`services.entrypoints.cli.local`) — but ``serve``,
``init-db`` and ``demo`` (which runs ``serve``): they make it.

The import is light — typer and nothing of the server's stack — so a client command against a
running server starts fast: each command imports what it needs when it runs.
``python -m services.entrypoints.cli`` is ``palimpsest``."""

from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path

import typer

from domain.errors import PalimpsestError
from services.entrypoints.cli import (
    cards,
    failures,
    forget,
    ingest,
    keys,
    local,
    mcp,
    proposals,
    queries,
    remote,
    retention,
    serve,
    writes,
)

cli = typer.Typer(
    cls=remote.JsonErrorsGroup,  # with --json, usage errors are one JSON object too
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Palimpsest: bi-temporal, event-sourced long-term memory for AI assistants.",
)


DataDir = local.DataDir
AsJson = typer.Option(False, "--json", help="One JSON object on stdout.")


@cli.command("init-db")
def init_db(data_dir: Path = DataDir, as_json: bool = AsJson) -> None:
    """Create the event store's schema, table, runtime role and append-only guards (idempotent);
    on the embedded default, the data folder and its PostgreSQL first.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    from infra.postgres import admin_database, bootstrap

    settings = local.settings(data_dir, as_json=as_json, create=True)
    admin = admin_database(settings)
    bootstrap(admin, settings)
    ready = {"schema": settings.event_schema, "host": admin.host, "port": admin.port,
             "runtime_role": settings.runtime_role,
             "data_dir": None if settings.database_url else str(Path(settings.data_dir).resolve())}
    typer.echo(json.dumps(ready) if as_json else
               f"event store ready: schema {settings.event_schema!r} on {admin.host}:{admin.port}, "
               f"runtime role {settings.runtime_role!r}")


@cli.command()
def demo(
    url: str = typer.Option(None, help="Write to the server at this URL (its key: --key or "
                            "PALIMPSEST_KEY); default: run `palimpsest serve` in this process."),
    key: str = typer.Option(None, envvar="PALIMPSEST_KEY", show_default=False,
                            help="The API key for --url."),
    data_dir: Path = DataDir,
) -> None:
    """Write two months of scripted history through the REST client, then print every slot on both
    timelines and ask the read models (fed through the relay, Kafka and Faust) bi-temporal questions.

    Without --url it runs `palimpsest serve` in this process; local: opens the database in
    --data-dir / PALIMPSEST_DATABASE_URL directly, and makes the data folder as serve does."""
    from services.entrypoints.demo import play

    started = time.perf_counter()
    play(local.settings(data_dir, create=True), typer.echo, url=url, key=key)
    typer.echo(f"done in {time.perf_counter() - started:.1f} s")


@cli.command()
def relay(data_dir: Path = DataDir) -> None:
    """Publish the event log to Kafka, in order, from the relay's stored position (runs until stopped;
    keeps the data folder's embedded broker up unless PALIMPSEST_KAFKA_BOOTSTRAP is set).

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    from services.entrypoints.relay import run_relay

    run_relay(local.settings(data_dir))


@cli.command()
def project(data_dir: Path = DataDir) -> None:
    """Run the projector: catch up from the log, then apply Kafka deliveries (runs until stopped).

    A poison event parks its aggregate (``palimpsest failures``); exits with code 3 only when the
    projector itself cannot go on (its bookkeeping refused, the database gone at the start).

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    from services.entrypoints.projector import run_projector

    raise SystemExit(run_projector(local.settings(data_dir)))


@cli.command()
def pipeline(data_dir: Path = DataDir) -> None:
    """Broker (embedded unless PALIMPSEST_KAFKA_BOOTSTRAP is set), relay and projector, supervised by
    one process: every write reaches the read models (runs until stopped; a broker or projector that
    dies is started again; Ctrl-C stops it all within 5 s).

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    from services.entrypoints.pipeline import run_pipeline

    raise SystemExit(run_pipeline(local.settings(data_dir)))


@cli.command()
def rebuild(
    known_at: str = typer.Option(None, help="Build the read models as known at this ISO time, "
                                 "into a schema of their own (nothing is swapped)."),
    into: str = typer.Option(None, help="Build into this schema and swap nothing."),
    workers: int = typer.Option(None, min=1, help="Processes that fold the log (default: "
                                "PALIMPSEST_REBUILD_WORKERS, one per core, at most 4); 1 folds "
                                "it in this process."),
    data_dir: Path = DataDir, as_json: bool = AsJson,
) -> None:
    """Replay the whole log into a fresh schema, check it, and swap it in while queries go on.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    from dataclasses import asdict
    from datetime import datetime

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from services.entrypoints.rebuild import run_rebuild

    moment = datetime.fromisoformat(known_at) if known_at else None
    if moment is not None and moment.tzinfo is None:
        raise typer.BadParameter("--known-at needs a time zone, e.g. 2026-10-01T00:00:00+08:00")
    settings = local.settings(data_dir, as_json=as_json)
    columns = (TextColumn("replaying"), BarColumn(), TextColumn("{task.fields[done]}"),
               TextColumn("{task.fields[rate]:>8,.0f} events/s"), TimeRemainingColumn())
    # the bar on stderr: stdout is the report (one JSON object with --json)
    with Progress(*columns, console=Console(stderr=True), disable=as_json) as bar:
        task = bar.add_task("replay", total=None, rate=0.0, done="")
        started = time.perf_counter()

        def progress(done: int, total: int) -> None:
            rate = done / max(time.perf_counter() - started, 1e-9)
            bar.update(task, completed=done, total=total, rate=rate, done=f"{done}/{total}")

        report = run_rebuild(settings, known_at=moment, into=into, workers=workers, progress=progress)
    if as_json:
        typer.echo(json.dumps({**asdict(report), "rate": report.rate}, default=str))
        return
    typer.echo(f"{report.events} events replayed in {report.seconds:.1f} s "
               f"({report.rate:,.0f} events/s) into {report.schema}"
               + (", swapped in" if report.swapped else "")
               + (f", then {report.caught_up} newer event(s) caught up" if report.caught_up else ""))
    for table, count in report.rows.items():
        typer.echo(f"  {table:<22} {count:>9} rows")
    for line in report.parked_lines():
        typer.echo(line)


@cli.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="One JSON object."),
    prometheus: bool = typer.Option(False, help="Prometheus text exposition format (over a "
                                    "server: a key with memory:admin, or the metrics token)."),
    url: str = typer.Option(None, "--url", envvar="PALIMPSEST_URL", help="Ask this server (with "
                            "PALIMPSEST_KEY) instead of reading the data folder."),
    key: str = remote.Key,
    data_dir: Path = DataDir,
) -> None:
    """The log head, the relay's and each projection's position and lag, failures, and whether the
    broker, the relay and the projector are alive (their heartbeats), read from the data folder.
    With --url or PALIMPSEST_URL: what that server says of the key's tenant and the pipeline.

    Without --url, local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    if url:
        remote.server_status(url, key, as_json, prometheus)
        return
    import psycopg

    from infra.postgres import admin_database, projector_database
    from projections.status import not_initialised, read_status

    settings = local.settings(data_dir, as_json=as_json)
    try:
        report = read_status(projector_database(admin_database(settings), settings), settings)
    except psycopg.Error as error:
        problem = not_initialised(error, settings)
        if problem is None:
            raise
        remote.fail(as_json, "not_initialised", str(problem))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), default=str))
        return
    if prometheus:
        typer.echo(report.prometheus(), nl=False)
        return
    relay_line = "never ran" if report.relay_position is None else (
        f"position {report.relay_position}, lag {report.relay_lag}")
    typer.echo(f"log head: {report.head}\nrelay: {relay_line}")
    for p in report.projections:
        typer.echo(f"projection {p.name}: position {p.position}, lag {p.lag}, "
                   f"{p.tenants} tenant(s), {len(p.failures)} failure(s)")
        for failure in p.failures:
            typer.echo(f"  failed at notification {failure['notification_id']} "
                       f"({failure['topic']}): {failure['error']}")
    typer.echo(f"cards: {report.cards}, embeddings pending: {report.embeddings_pending}")
    for line in report.liveness_lines():
        typer.echo(line)


queries.register(cli)
writes.register(cli)
failures.register(cli)
keys.register(cli)
cards.register(cli)
mcp.register(cli)
serve.register(cli)
ingest.register(cli)
proposals.register(cli)
forget.register(cli)
retention.register(cli)

bench = typer.Typer(no_args_is_help=True, help="Benchmarks (from a Palimpsest checkout with the dev extra).")
cli.add_typer(bench, name="bench")


def _run_benchmark(name: str, module: str, args: list[str]) -> None:
    """Run the benchmark ``tests.benchmarks.<module>.run.main`` of this checkout with ``args``."""
    import importlib
    import sys
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[3]  # tests/ is not installed: it lives beside services/
    if (checkout / "tests" / "benchmarks").is_dir() and str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    try:
        main = importlib.import_module(f"tests.benchmarks.{module}.run").main
    except ImportError as error:
        typer.echo(f"palimpsest bench {name} runs from a Palimpsest checkout with the dev extra "
                   f"(pip install -e '.[dev]'): {error}", err=True)
        raise SystemExit(2) from None
    raise SystemExit(main(args))


_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


@bench.command("aging", add_help_option=False, context_settings=_PASS_THROUGH)
def bench_aging(ctx: typer.Context) -> None:
    """Is the true value first as memories age? Palimpsest against baselines (--help: the options)."""
    _run_benchmark("aging", "aging", list(ctx.args))


@bench.command("ingest-quality", add_help_option=False, context_settings=_PASS_THROUGH)
def bench_ingest_quality(ctx: typer.Context) -> None:
    """How well turns become slots through ingest, any OpenAI-compatible model (--help: the options)."""
    _run_benchmark("ingest-quality", "ingest_quality", list(ctx.args))


@bench.command("conversations", add_help_option=False, context_settings=_PASS_THROUGH)
def bench_conversations(ctx: typer.Context) -> None:
    """Is the turn that answers a question found? LoCoMo-format recall (--help: the options)."""
    _run_benchmark("conversations", "conversations", list(ctx.args))


#: Palimpsest's own loggers: a line of theirs names ids, kinds, counts and lengths, never stored
#: text (STYLE 18), at every level. Other libraries' debug lines quote what they carry (a streamed
#: MCP answer, a request body): they stay at WARNING whatever the level asked.
OWN_LOGGERS = ("domain", "services", "infra", "projections")


def configure_logging(level: str) -> None:
    """Log to stderr: Palimpsest's own loggers at ``level``, every other library at WARNING (or
    ``level``, when that is higher)."""
    logging.basicConfig(level=max(logging.WARNING, logging.getLevelNamesMapping()[level]),
                        format="%(levelname)s %(name)s: %(message)s")
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(level)


def _log_level() -> str:
    """``PALIMPSEST_LOG_LEVEL`` (WARNING by default); a settings error is reported by the command."""
    from pydantic import ValidationError

    from infra.settings import Settings

    try:
        return Settings().log_level
    except ValidationError:
        return "WARNING"


def main() -> None:
    from infra.redact import hold_uncaught

    configure_logging(_log_level())
    hold_uncaught()  # an uncaught error is logged by type and frames, never by its message
    # The embedded server's lock folder falls back to /tmp where XDG_RUNTIME_DIR is unset: harmless.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    try:
        cli()
    except PalimpsestError as error:
        typer.echo(f"error: {error}", err=True)
        raise SystemExit(2) from None
