"""``palimpsest keys``: the API keys that say who a caller is (``services.keys``).

    palimpsest keys create --tenant T [--scope S ...] [--name N] [--json]   the secret, shown once
    palimpsest keys list [--tenant T] [--json]
    palimpsest keys revoke KEY_ID [--json]                                  refused at once

Local: it talks to the database of the configured settings (``PALIMPSEST_DATABASE_URL`` or the
data folder's embedded server, ``--data-dir``), not to a running server; a data folder without a
database is refused, never made. Scopes: ``memory:read``,
``memory:write`` (the two given when none is named; write may forget a card or a slot),
``memory:admin`` (read, write, arbitration decisions and reviews, ``/metrics``) and
``memory:erase`` (forgetting a subject, a session or a whole tenant, and setting its retention
policy: held only when named, never through admin; give agents keys without it). ``--json`` prints one object,
errors too (``{"error": {...}}``); an error exits with code 2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from services.entrypoints.cli import local
from services.entrypoints.cli.local import DataDir

if TYPE_CHECKING:
    from services.keys import KeyInfo, KeyStore

keys = typer.Typer(help="API keys: create one for a tenant (the secret is shown once), list, revoke "
                   f"({local.LOCAL}).", no_args_is_help=True)
AsJson = typer.Option(False, "--json", help="One JSON object on stdout, errors included.")
Scopes = typer.Option(None, "--scope", help="memory:read, memory:write, memory:admin or "
                      "memory:erase (erasing a subject, a session or the tenant, a retention "
                      "policy; admin does not hold it); repeat for more (default: memory:read "
                      "and memory:write).")


@contextmanager
def _store(as_json: bool, data_dir: Path | None) -> Iterator[KeyStore]:
    """The key store of the configured database; a refusal becomes one line (or object), exit 2."""
    from domain.errors import PalimpsestError
    from services.bootstrap import create_key_store
    from services.entrypoints.errors import answer

    settings = local.settings(data_dir, as_json=as_json)
    store = None
    try:
        store = create_key_store(settings)
        yield store
    except PalimpsestError as error:
        found = answer(error)
        if as_json:
            typer.echo(json.dumps(found.body(), ensure_ascii=False))
        else:
            typer.echo(f"error: {found.message} ({found.code})", err=True)
        raise SystemExit(2) from None
    finally:
        if store is not None:
            store.close()


def _line(info: KeyInfo) -> str:
    revoked = f"  revoked {info.revoked_at:%Y-%m-%d %H:%M:%S}" if info.revoked_at else ""
    name = f"  {info.name!r}" if info.name else ""
    return (f"{info.key_id}  {info.tenant_id}  {','.join(info.scopes)}  "
            f"created {info.created_at:%Y-%m-%d %H:%M:%S}{name}{revoked}")


def _emit(payload: dict[str, Any], as_json: bool, text: str) -> None:
    typer.echo(json.dumps(payload, ensure_ascii=False) if as_json else text)


@keys.command()
def create(tenant: str = typer.Option(..., "--tenant", help="The tenant the key speaks for."),
           scope: list[str] | None = Scopes,
           name: str = typer.Option("", "--name", help="What the key is for (shown in the list)."),
           data_dir: Path = DataDir, as_json: bool = AsJson) -> None:
    """Make a key for a tenant and print its secret: it is shown this once, and kept hashed.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    with _store(as_json, data_dir) as store:
        info, secret = store.create(tenant, scope or (), name)
    _emit({**info.to_dict(), "secret": secret}, as_json,
          f"{_line(info)}\nsecret (shown once): {secret}")


@keys.command("list")
def listing(tenant: str = typer.Option(None, "--tenant", help="Only this tenant's keys."),
            data_dir: Path = DataDir, as_json: bool = AsJson) -> None:
    """The keys, oldest first, revoked ones included (never their secrets).

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    with _store(as_json, data_dir) as store:
        found = store.list(tenant)
    _emit({"keys": [info.to_dict() for info in found]}, as_json,
          "\n".join(_line(info) for info in found) or "no keys")


@keys.command()
def revoke(key_id: str = typer.Argument(..., metavar="KEY_ID", help="The key's id, as listed."),
           data_dir: Path = DataDir, as_json: bool = AsJson) -> None:
    """Revoke a key: every request with it is refused from now on.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    with _store(as_json, data_dir) as store:
        info = store.revoke(key_id)
    _emit(info.to_dict(), as_json, f"revoked: {_line(info)}")


def register(cli: typer.Typer) -> None:
    """Add ``palimpsest keys`` to the command line."""
    cli.add_typer(keys, name="keys")
