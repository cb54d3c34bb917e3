"""``palimpsest retention``: how long raw conversation turns are kept (DESIGN §7).

    palimpsest retention show                              the tenant's policy
    palimpsest retention set --days N [--extracted]        erase turns said more than N days ago
    palimpsest retention set --keep                        keep every turn (the default)
    palimpsest retention apply --tenant T                  run the policy now, on this machine

``show`` and ``set`` go over a running server by default, as ``forget`` does (``--url``, ``--key``,
``--json``; setting needs a key with ``memory:erase``, and who set it is the key). With
``--tenant T`` they work locally on the data folder's store (``--data-dir``, or
``PALIMPSEST_DATABASE_URL``; a folder without a database is refused, never made): no server and no
key; who set it is ``--by``. ``serve`` applies every tenant's policy each
``PALIMPSEST_RETENTION_INTERVAL_SECONDS``; ``apply`` does it now for one tenant, locally, at most
``PALIMPSEST_RETENTION_BATCH`` turns, and says how many it erased. A running ``serve`` (or
``pipeline``) projects the erasures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import typer

from services.entrypoints.cli import local
from services.entrypoints.cli.forget import By, Tenant
from services.entrypoints.cli.local import DataDir
from services.entrypoints.cli.mcp import stdout_to_stderr
from services.entrypoints.cli.remote import REFUSED, AsJson, Key, Url, emit, fail, remote

retention = typer.Typer(no_args_is_help=True, help="How long raw conversation turns are kept: "
                        "show or set the tenant's policy, or apply it now.")


def _kept(answer: Mapping[str, Any]) -> str:
    if answer["turn_days"] is None:
        return "every raw conversation turn is kept"
    made = ("the cards extraction made of them are erased with them" if answer["extracted"]
            else "the cards extraction made of them are kept")
    return f"raw conversation turns are kept {answer['turn_days']} days; {made}"


def _print_policy(answer: Mapping[str, Any]) -> None:
    typer.echo(_kept(answer))


def _print_set(answer: Mapping[str, Any]) -> None:
    typer.echo("retention set: " + _kept(answer)
               + (f"; position {answer['position']}" if answer.get("position") is not None else "")
               + ("; answered from an earlier identical request" if answer.get("replayed") else ""))


def _print_applied(answer: Mapping[str, Any]) -> None:
    if answer["turn_days"] is None:
        typer.echo(f"tenant {answer['tenant']} has no retention policy: every turn is kept")
        return
    typer.echo(f"erased {answer['turns_erased']} turn(s) of tenant {answer['tenant']} said more "
               f"than {answer['turn_days']} days ago")


def _local(as_json: bool, data_dir: Path | None, use: Callable[[Any, Any], dict[str, Any]]
           ) -> dict[str, Any]:
    """``use(app, settings)`` on the data folder's store, as the operator; an error becomes
    :func:`fail`."""
    from pydantic import ValidationError

    from domain.errors import PalimpsestError
    from services.entrypoints.errors import answer
    from services.factory import create_app

    settings = local.settings(data_dir, as_json=as_json)
    try:
        with stdout_to_stderr():  # what the embedded server says on its start is not the answer
            app = create_app(settings)
        try:
            done = use(app, settings)
        finally:
            app.close()
    except (PalimpsestError, ValidationError) as error:
        found = answer(error)
        fail(as_json, found.code, found.message, status=found.status, retryable=found.retryable)
    return done


def _policy(app: Any, tenant: str) -> dict[str, Any]:
    found = app.retention(tenant)
    return {"turn_days": found.turn_days, "extracted": found.extracted}


@retention.command()
def show(tenant: str = Tenant, data_dir: Path = DataDir, url: str = Url, key: str = Key,
         as_json: bool = AsJson) -> None:
    """The tenant's policy: how many days a raw turn is kept, and the cards made of it."""
    if tenant is not None:
        answer = _local(as_json, data_dir, lambda app, _: _policy(app, tenant))
    else:
        with remote(url, key, as_json) as server:
            answer = server.retention()
    emit(answer, as_json, _print_policy)


@retention.command("set")
def set_policy(days: int = typer.Option(None, "--days", min=1, show_default=False,
                                        help="Erase the turns said more than this many days ago."),
               keep: bool = typer.Option(False, "--keep", help="Keep every turn (no policy)."),
               extracted: bool = typer.Option(False, "--extracted", help="Erase the cards "
                                              "extraction made of an expired turn too."),
               request_id: str = typer.Option(None, "--request-id", help="Sets once: a retry "
                                              "with the same id answers the same."),
               tenant: str = Tenant, by: str = By, data_dir: Path = DataDir, url: str = Url,
               key: str = Key, as_json: bool = AsJson) -> None:
    """Set the policy: --days N (over a server, a key with memory:erase), or --keep."""
    if (days is None) == (not keep):
        fail(as_json, "usage_error", "give either --days N or --keep", exit_code=REFUSED)
    if keep and extracted:
        fail(as_json, "usage_error", "--keep keeps every turn and what was made of them: "
             "--extracted says nothing with it", exit_code=REFUSED)
    fields = {"turn_days": days, "extracted": extracted,
              **({"request_id": request_id} if request_id else {})}
    if tenant is not None:
        answer = _local(as_json, data_dir, lambda app, _: _set_locally(app, tenant, fields, by))
    else:
        with remote(url, key, as_json) as server:
            answer = server.set_retention(**fields)
    emit(answer, as_json, _print_set)


def _set_locally(app: Any, tenant: str, fields: dict[str, Any], by: str) -> dict[str, Any]:
    from services.command.retention import SetRetention

    result = app.set_retention(tenant, SetRetention(**fields, set_by=by))
    return {"turn_days": fields["turn_days"], "extracted": fields["extracted"],
            "position": result.position, "replayed": result.replayed}


@retention.command()
def apply(tenant: str = typer.Option(..., "--tenant", help="The tenant whose policy to apply."),
          data_dir: Path = DataDir, as_json: bool = AsJson) -> None:
    """Apply the tenant's policy now, on this machine; say how many turns it erased.

    At most PALIMPSEST_RETENTION_BATCH turns a run: once those erasures are projected, run it
    again for more.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    settings = local.settings(data_dir, as_json=as_json)
    with ExitStack() as stack:
        with stdout_to_stderr():
            read = stack.enter_context(local.read_models(settings, as_json))
        answer = _local(as_json, data_dir, lambda app, settings: _apply(app, read, settings, tenant))
    emit(answer, as_json, _print_applied)


def _apply(app: Any, read: Any, settings: Any, tenant: str) -> dict[str, Any]:
    from services.command.retention import RetentionWorker

    worker = RetentionWorker(app, read, interval=settings.retention_interval_seconds,
                             batch=settings.retention_batch)
    erased = worker.apply(tenant)
    return {"tenant": tenant, **_policy(app, tenant), "turns_erased": erased}


def register(cli: typer.Typer) -> None:
    """Add ``palimpsest retention`` to the command line."""
    cli.add_typer(retention, name="retention")
