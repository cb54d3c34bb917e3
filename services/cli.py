"""The ``palimpsest`` command line."""

from __future__ import annotations

import logging
import time

import typer

from domain.errors import PalimpsestError
from infra.settings import Settings

cli = typer.Typer(
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Palimpsest: bi-temporal, event-sourced long-term memory for AI assistants.",
)


@cli.command("init-db")
def init_db() -> None:
    """Create the event store's schema, table, runtime role and append-only guards (idempotent)."""
    from infra.postgres import admin_database, bootstrap

    settings = Settings()
    admin = admin_database(settings)
    bootstrap(admin, settings)
    typer.echo(f"event store ready: schema {settings.event_schema!r} on {admin.host}:{admin.port}, "
               f"runtime role {settings.runtime_role!r}")


@cli.command()
def demo() -> None:
    """Write two months of scripted history through the real commands and print every slot."""
    from services.demo import SimulatedClock, print_report, run_demo
    from services.factory import create_app

    settings = Settings()
    where = "in memory" if settings.persistence == "memory" else (
        "on PostgreSQL" if settings.database_url else f"on the embedded PostgreSQL in {settings.data_dir}/"
    )
    typer.echo(f"Starting the event store {where} …")
    started = time.perf_counter()
    clock = SimulatedClock()
    app = create_app(settings, clock=clock)
    try:
        script = run_demo(app, clock, typer.echo)
        print_report(script, typer.echo)
    finally:
        app.close()
    typer.echo(f"done in {time.perf_counter() - started:.1f} s")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cli()
    except PalimpsestError as error:
        typer.echo(f"error: {error}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
