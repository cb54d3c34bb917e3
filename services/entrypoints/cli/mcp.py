"""``palimpsest mcp``: Palimpsest as an MCP server over stdio, for a client that spawns it.

The client's configuration names the command and the key, e.g.::

    {"command": "palimpsest", "args": ["mcp"], "env": {"PALIMPSEST_KEY": "pk_…"}}

The key is checked before the first message is read (a missing, unknown or revoked key exits with
code 2 and says why on stderr) and again at every call. Nothing but the protocol reaches stdout.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from domain.errors import AuthenticationError
from services.entrypoints.cli import local

if TYPE_CHECKING:
    from infra.settings import Settings


def register(cli: typer.Typer) -> None:
    cli.command("mcp")(mcp)


def mcp(data_dir: Path = local.DataDir) -> None:
    """Serve MCP over stdio (the key from PALIMPSEST_KEY) on this data folder's or
    PALIMPSEST_DATABASE_URL's event store and read models; runs until the client closes it.

    local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
    from services.bootstrap import build_services
    from services.entrypoints.mcp import run_stdio

    key, settings = os.environ.get("PALIMPSEST_KEY"), local.settings(data_dir)
    with stdout_to_stderr():  # the embedded servers' start says nothing on the protocol's channel
        _check(settings, key)  # before the read path's warm-up: a bad key is told at once
        services = build_services(settings)
    try:
        run_stdio(services, key)
    except AuthenticationError as error:
        _refuse(error)
    finally:
        services.close()


def _check(settings: Settings, key: str | None) -> None:
    from services.bootstrap import create_key_store

    keys = create_key_store(settings)
    try:
        keys.authenticate(key)
    except AuthenticationError as error:
        _refuse(error)
    finally:
        keys.close()


def _refuse(error: AuthenticationError) -> NoReturn:
    typer.echo(f"error: {error} (set PALIMPSEST_KEY; palimpsest keys create --tenant TENANT makes one)",
               err=True)
    raise SystemExit(2) from None


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 on stderr meanwhile, for this process and the children it starts."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
