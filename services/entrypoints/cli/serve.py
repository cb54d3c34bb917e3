"""``palimpsest serve``: the main job (:mod:`services.entrypoints.serve`)."""

from __future__ import annotations

from pathlib import Path

import typer

from services.entrypoints.cli import local


def register(cli: typer.Typer) -> None:
    cli.command()(serve)
    cli.command("api-worker", hidden=True)(api_worker)


def serve(
    host: str = typer.Option(None, help="Address to listen on (default PALIMPSEST_API_HOST, 127.0.0.1)."),
    port: int = typer.Option(None, min=0, max=65_535,
                             help="Port (default PALIMPSEST_API_PORT, 8765; 0: a free one)."),
    no_mcp: bool = typer.Option(False, "--no-mcp", help="REST only: no MCP endpoint at /mcp."),
    key: bool = typer.Option(None, "--key/--no-key",
                             help="Make a key for the tenant 'local' on the first start (default: on "
                                  "the embedded PostgreSQL only)."),
    workers: int = typer.Option(None, min=1, max=64, help="HTTP worker processes (default "
                                "PALIMPSEST_API_WORKERS: one per core, at most 4)."),
    pipeline: bool = typer.Option(None, "--pipeline/--no-pipeline",
                                  help="Run the broker, relay, projector and extraction worker too "
                                       "(default PALIMPSEST_SERVE_PIPELINE, on); off where they run "
                                       "as services of their own."),
    data_dir: Path = local.DataDir,
    as_json: bool = typer.Option(False, "--json", help="Once it answers, one JSON object on stdout: "
                                 "the REST and MCP URLs, and the key when just made."),
) -> None:
    """Run Palimpsest: PostgreSQL and the broker (embedded unless PALIMPSEST_DATABASE_URL and
    PALIMPSEST_KAFKA_BOOTSTRAP are set), the relay, the Faust projector and the HTTP server (REST
    under /v1, MCP at /mcp), supervised; Ctrl-C or SIGTERM stops them all within seconds.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly, and makes the data
    folder on the first start."""
    from services.entrypoints.cli.remote import fail
    from services.entrypoints.serve import CannotListenError, run_serve

    settings = local.settings(data_dir, as_json=as_json, create=True)
    changed = {"api_workers": workers, "serve_pipeline": pipeline}
    settings = settings.model_copy(update={k: v for k, v in changed.items() if v is not None})
    if settings.persistence != "postgres":
        raise typer.BadParameter("serve needs PostgreSQL: unset PALIMPSEST_PERSISTENCE=memory")
    try:
        code = run_serve(settings, host=host, port=port, mcp=not no_mcp, local_key=key,
                         say=typer.echo, as_json=as_json)
    except CannotListenError as error:
        fail(as_json, "cannot_listen", str(error))
    except OSError as error:
        fail(as_json, "cannot_serve", f"cannot serve: {error}")
    exit_now(code)


def api_worker(
    fd: int = typer.Option(..., help="The listening socket's file descriptor, inherited."),
    ready_fd: int = typer.Option(None, help="A pipe to write 'ready' to once it listens."),
    no_mcp: bool = typer.Option(False, "--no-mcp"),
) -> None:
    """One HTTP worker process of `palimpsest serve` (started by serve, never by hand)."""
    from infra.settings import Settings
    from services.entrypoints.api_workers import run_api_worker

    exit_now(run_api_worker(Settings(), fd, ready_fd, mcp=not no_mcp))


def exit_now(code: int) -> None:
    """Exit once everything is stopped, without tearing the heap down: the tokenizer's dictionaries
    and the embedding model take seconds to free, which a stop must not wait for."""
    import logging
    import os
    import sys

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
