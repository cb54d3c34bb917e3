"""What the local commands share: the ones that open the database themselves instead of asking a
running server (``init-db``, ``serve``, ``relay``, ``project``, ``pipeline``, ``rebuild``,
``status`` without a server, ``failures``, ``keys``, ``mcp``, ``ingest-worker``, ``retention
apply``, and ``forget``, ``export`` and ``retention show|set`` given ``--tenant``).

Each says so in its ``--help`` (:data:`LOCAL`) and takes ``--data-dir`` (default
``PALIMPSEST_DATA_DIR``, else ``./.palimpsest``). Reading never makes a database: a command other
than ``serve`` and ``init-db`` refuses a data folder that holds none (exit code 2, saying where it
looked and what to run) instead of starting an empty one there (:func:`settings`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from services.entrypoints.cli.remote import fail

if TYPE_CHECKING:
    from infra.settings import Settings

#: The line every local command's help ends with.
LOCAL = "local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly"

DataDir = typer.Option(None, "--data-dir", envvar="PALIMPSEST_DATA_DIR", show_default=False,
                       file_okay=False, help="The data folder of the embedded PostgreSQL "
                       "(default: ./.palimpsest); ignored when PALIMPSEST_DATABASE_URL is set.")


def settings(data_dir: Path | None, *, as_json: bool = False, create: bool = False) -> Settings:
    """The configured settings, the data folder ``data_dir`` when given (through
    ``PALIMPSEST_DATA_DIR``, so the processes this one starts use it too). Unless ``create``
    (``serve``, ``init-db``), a data folder that holds no database is refused."""
    from infra.settings import Settings

    use_data_dir(data_dir)
    found = Settings()
    if not create:
        require_database(found, as_json)
    return found


def use_data_dir(data_dir: Path | None) -> None:
    """Name the data folder for this process and the processes it starts (none: as configured)."""
    if data_dir is not None:
        os.environ["PALIMPSEST_DATA_DIR"] = str(data_dir)


def require_database(settings: Settings, as_json: bool = False) -> None:
    """Refuse (exit code 2) a data folder where the embedded PostgreSQL was never made: opening
    it would make an empty one. An external database (``PALIMPSEST_DATABASE_URL``) and the
    in-memory store are taken as they are."""
    if settings.persistence != "postgres" or settings.database_url is not None:
        return
    folder = Path(settings.data_dir).resolve()
    if (folder / "pg" / "PG_VERSION").exists():
        return
    where = "does not exist" if not folder.exists() else "holds no Palimpsest database"
    fail(as_json, "not_initialised", f"no database to open: the data folder {folder} {where}. "
         "Run `palimpsest serve` (or `palimpsest init-db`) to make it, or name the folder that "
         "holds yours with --data-dir or PALIMPSEST_DATA_DIR (an external database: "
         "PALIMPSEST_DATABASE_URL)")


@contextmanager
def read_models(settings: Settings, as_json: bool) -> Iterator[Any]:
    """This machine's read models as the runtime role; a refusal becomes :func:`fail`
    (exit code 2)."""
    from pydantic import ValidationError

    from domain.errors import PalimpsestError
    from infra.postgres import admin_database, bootstrap, runtime_database
    from services.entrypoints.errors import answer
    from services.query.readmodels import ReadModels

    try:
        admin = admin_database(settings)
        if settings.auto_bootstrap:
            bootstrap(admin, settings)
        read = ReadModels(runtime_database(admin, settings), settings.read_schema, pool_size=1)
        try:
            yield read
        finally:
            read.close()
    except (PalimpsestError, ValidationError) as error:
        found = answer(error)
        fail(as_json, found.code, found.message, status=found.status, retryable=found.retryable)
