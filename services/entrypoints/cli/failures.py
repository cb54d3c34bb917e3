"""``palimpsest failures``: the events a projection parked, and what an operator does with them.

    palimpsest failures [--all] [--json]            list parked events (--all: retried, skipped too)
    palimpsest failures retry [ID] [--json]         apply parked aggregates again from the log
    palimpsest failures skip ID --reason R --by NAME [--json]  skip one, recorded in the log

``ID`` is the parked event's notification id, as the list shows it. Local: on the data folder's
database (``--data-dir``) or ``PALIMPSEST_DATABASE_URL``; a folder without one is refused. Errors
exit with code 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from services.entrypoints.cli import local
from services.entrypoints.cli.local import DataDir

failures = typer.Typer(help=f"Parked events: list them, retry them after a fix, skip one ({local.LOCAL}).")
AsJson = typer.Option(False, "--json", help="One JSON object on stdout.")


@contextmanager
def _projector(data_dir: Path | None, as_json: bool) -> Iterator[tuple[Any, Any]]:
    """The command side (its log) and the incremental projector, as ``palimpsest project`` has."""
    from projections.replay import make_projector
    from services.factory import create_app
    settings = local.settings(data_dir, as_json=as_json)
    app = create_app(settings)
    projector = make_projector(settings, app)
    try:
        yield projector, app
    finally:
        projector.close()
        app.close()


@failures.callback(invoke_without_command=True)
def listing(ctx: typer.Context,
            everything: bool = typer.Option(False, "--all", help="Retried and skipped ones too."),
            data_dir: Path = DataDir, as_json: bool = AsJson) -> None:
    """The events the cards projection holds parked, oldest first.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    if ctx.invoked_subcommand is not None:
        local.use_data_dir(data_dir)  # `failures --data-dir D retry`
        return
    from infra.postgres import admin_database, projector_database
    from projections.status import parked
    settings = local.settings(data_dir, as_json=as_json)
    report = parked(projector_database(admin_database(settings), settings), settings,
                    resolved=everything)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), default=str, ensure_ascii=False))
        return
    typer.echo(f"{report.count} parked event(s) in {report.aggregates} aggregate(s)")
    for e in report.events:
        decided = f" — {e['resolution']} ({e['resolved_by']})" if e["resolution"] else ""
        typer.echo(f"#{e['notification_id']} {e['status']:<8} {e['tenant_id']} "
                   f"{e['originator_id']} v{e['originator_version']} {e['topic']} "
                   f"since {e['since']:%Y-%m-%d %H:%M:%S} ×{e['failures']} "
                   f"{e['reason']}: {e['error']}{decided}")


@failures.command()
def retry(notification: int = typer.Argument(None, metavar="[ID]", help="A parked event's "
                                             "notification id; none: every parked aggregate."),
          data_dir: Path = DataDir, as_json: bool = AsJson) -> None:
    """Apply parked aggregates' events again from the log (after a fix); what still fails is
    parked again.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    from projections.failures import retry as retry_parked

    with _projector(data_dir, as_json) as (projector, app):
        done = retry_parked(projector, app, notification)
    if as_json:
        typer.echo(json.dumps({"retried": [asdict(each) for each in done]}, default=str))
        return
    for each in done:
        what = each.originator_id or "the log (a message that was no relayed event)"
        typer.echo(f"{each.tenant_id} {what}: {each.applied} event(s) applied"
                   + (", still parked" if each.parked else ""))
    if not done:
        typer.echo("nothing is parked")


@failures.command()
def skip(notification: int = typer.Argument(..., metavar="ID", help="The parked event's "
                                            "notification id."),
         reason: str = typer.Option(..., "--reason", help="Why it is skipped (kept in the log)."),
         by: str = typer.Option(..., "--by", help="Who decided (kept in the log)."),
         data_dir: Path = DataDir, as_json: bool = AsJson) -> None:
    """Skip one parked event: the decision is an event in the log, so a rebuild skips it too;
    the rest of its aggregate is applied.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    from projections.failures import skip as skip_parked

    with _projector(data_dir, as_json) as (projector, app):
        done = skip_parked(projector, app, notification, reason, by)
    if as_json:
        typer.echo(json.dumps({"skipped": notification, **asdict(done)}, default=str))
        return
    typer.echo(f"skipped notification {notification}; {done.applied} later event(s) of "
               f"{done.originator_id} applied" + (", still parked" if done.parked else ""))


def register(cli: typer.Typer) -> None:
    """Add ``palimpsest failures`` to the command line."""
    cli.add_typer(failures, name="failures")
