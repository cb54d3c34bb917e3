"""The command line over a running server: what its client commands share — ``--url``, ``--key``,
``--json``, errors, times, tables — the ``palimpsest`` group that answers usage errors in JSON, and
``status`` when a server is named. The commands are in :mod:`services.entrypoints.cli.queries`
(search, facts, history, briefing, context) and :mod:`services.entrypoints.cli.writes` (remember,
revise, correct, verify, link, move, arbitrations).

Each command is a thin client of ``palimpsest serve`` through :class:`palimpsest_client.Client`:
it loads ``httpx`` and nothing of the server (no database, no model, no tokenizer). Shared options:

    --url URL   the server (default PALIMPSEST_URL, else http://127.0.0.1:8765)
    --key KEY   its API key (default PALIMPSEST_KEY); the tenant comes from the key
    --json      one JSON object on stdout: the server's answer, or ``{"error": {"code", "message",
                "retryable", "status"}}`` — usage errors included (``"code": "usage_error"``)

Exit codes: 0 done; 2 refused (a usage error, bad input, no or a wrong key, not found, a
conflict); 1 failed (no server answers, the server or a dependency failed).

Tables (:func:`table`) print an id whole, never wrapped or cut, so it can be copied into the next
command; only free text wraps, and what does not fit the terminal is left out (said on stderr)
unless ``--wide``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from typer.core import TyperGroup

from domain.errors import PalimpsestError

if TYPE_CHECKING:
    from palimpsest_client import Client

Url = typer.Option(None, "--url", envvar="PALIMPSEST_URL", show_default=False,
                   help="The server's URL (default: http://127.0.0.1:8765).")
Key = typer.Option(None, "--key", envvar="PALIMPSEST_KEY", show_default=False,
                   help="The API key; its tenant is the one read and written.")
AsJson = typer.Option(False, "--json", help="One JSON object on stdout, errors included.")

REFUSED, FAILED = 2, 1


# --- errors: one JSON object with --json, a line on stderr without -----------------------------


def fail(as_json: bool, code: str, message: str, *, status: int | None = None,
         retryable: bool = False, exit_code: int = REFUSED) -> NoReturn:
    """Say why a command did not do its work, and exit with ``exit_code``."""
    if as_json:
        error: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
        if status is not None:
            error["status"] = status
        typer.echo(json.dumps({"error": error}, ensure_ascii=False))
    else:
        typer.echo(f"error: {message} ({code})", err=True)
    raise SystemExit(exit_code)


def _hint(status: int, key: str | None, message: str = "") -> str:
    if status == 401 and not key:
        return "; set PALIMPSEST_KEY (palimpsest serve prints one; palimpsest keys create makes one)"
    if status == 403 and "'memory:erase'" in message:
        return ("; forgetting a subject, a session or a tenant needs a key made with "
                "--scope memory:erase (palimpsest keys create)")
    return ""


@contextmanager
def remote(url: str | None, key: str | None, as_json: bool) -> Iterator[Client]:
    """A client of the server for one command; what goes wrong on the way becomes :func:`fail`."""
    import httpx
    from palimpsest_client import DEFAULT_URL, APIError, Client

    where = url or DEFAULT_URL
    try:
        with Client(where, key or "") as client:
            yield client
    except APIError as error:
        failed = error.status >= 500
        fail(as_json, error.code, error.message + _hint(error.status, key, error.message),
             status=error.status, retryable=error.retryable,
             exit_code=FAILED if failed else REFUSED)
    except json.JSONDecodeError:
        fail(as_json, "not_palimpsest", f"the answer from {where} is not JSON: is it a Palimpsest "
             "server?", exit_code=FAILED)
    except httpx.TimeoutException as error:
        fail(as_json, "timeout", f"the server at {where} did not answer in time ({error})",
             retryable=True, exit_code=FAILED)
    except httpx.TransportError as error:
        fail(as_json, "unreachable", f"no Palimpsest server answers at {where} ({error}); start one "
             "with `palimpsest serve`, or name it with --url or PALIMPSEST_URL", retryable=True,
             exit_code=FAILED)


def moment(text: str | None) -> str | None:
    """An option's ISO 8601 time as the server takes it; a time without a zone is read in this
    machine's zone. Anything else is a usage error."""
    if text is None:
        return None
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"not an ISO 8601 time: {text!r} (e.g. 2026-10-01T09:00+08:00)"
                                 ) from None
    return (found if found.tzinfo else found.astimezone()).isoformat()


def Moment(help: str) -> Any:  # noqa: N802 - an option's factory, named like the others
    return typer.Option(None, callback=moment, help=f"{help} (ISO 8601)")


def emit(answer: Any, as_json: bool, human: Callable[[Any], None] | None = None) -> None:
    """The server's answer: as is with ``--json``, else through ``human`` (a line per item)."""
    if as_json:
        typer.echo(json.dumps(answer, ensure_ascii=False))
    elif human is not None:
        human(answer)


#: The narrowest a wrapping column is squeezed to before a column is left out.
NARROWEST = 20


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, wrap: Collection[str] = (),
          optional: Sequence[str] = (), wide: bool = False) -> None:
    """Rows under headers, with Rich; stored text is printed as text, never as markup.

    Only the columns named in ``wrap`` (free text) wrap; every other one — ids above all — is
    printed whole, never wrapped, folded or cut, so an id can be copied into the next command.
    When the terminal is too narrow for the whole columns and the wrapping ones at
    :data:`NARROWEST`, the ``optional`` columns are left out, the first named first, and a line
    on stderr says which; ``wide``: every column, lines as long as they need to be."""
    from rich.console import Console
    from rich.table import Table

    cells = [["—" if cell is None else str(cell) for cell in row] for row in rows]
    needs = [_width([header, *(row[i] for row in cells)]) for i, header in enumerate(headers)]
    least = [min(need, max(_width([header]), NARROWEST)) if header in wrap else need
             for header, need in zip(headers, needs, strict=True)]
    room = Console().width  # the terminal's, else COLUMNS, else 80
    kept = list(range(len(headers)))
    if wide:
        room = max(room, _span(needs, kept))
    else:
        for name in optional:
            if _span(least, kept) <= room:
                break
            kept = [i for i in kept if headers[i] != name]
        room = max(room, _span(least, kept))  # whole columns stay whole past the terminal's edge
    grid = Table(box=None, pad_edge=False, header_style="bold")
    for i in kept:
        if headers[i] in wrap:
            grid.add_column(headers[i], overflow="fold", min_width=least[i])
        else:
            grid.add_column(headers[i], no_wrap=True, min_width=needs[i])
    for row in cells:
        grid.add_row(*(row[i] for i in kept))
    Console(width=room, markup=False, emoji=False, highlight=False, soft_wrap=False).print(grid)
    left_out = [headers[i] for i in range(len(headers)) if i not in kept]
    if left_out:
        typer.echo(f"(left out for the terminal's width: {', '.join(left_out)}; --wide shows "
                   "every column, --json everything)", err=True)


def _width(texts: Iterable[str]) -> int:
    """The terminal cells the longest line of ``texts`` takes (a CJK character takes two)."""
    from rich.cells import cell_len

    return max((cell_len(line) for text in texts for line in text.splitlines() or [""]), default=0)


def _span(widths: Sequence[int], kept: Sequence[int]) -> int:
    """The width of the kept columns, with the two cells between neighbours."""
    return sum(widths[i] for i in kept) + 2 * max(len(kept) - 1, 0)


Wide = typer.Option(False, "--wide", help="Every column, however wide the lines get.")


def when(value: str | None) -> str:
    """An ISO time from the server, to the minute, in this machine's zone."""
    if not value:
        return "—"
    return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M")


# --- usage errors with --json ----------------------------------------------------------------


def _wants_json(args: Sequence[str]) -> bool:
    given = list(args)
    return "--json" in (given[:given.index("--")] if "--" in given else given)


def _code(error: PalimpsestError) -> str:
    """``CardNotFoundError`` → ``card_not_found``: a local command's error, named as REST would."""
    name = type(error).__name__.removesuffix("Error")
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


class JsonErrorsGroup(TyperGroup):
    """The ``palimpsest`` group: with ``--json`` anywhere on the line, a usage error (an unknown
    option, a missing argument, a bad value) and a ``PalimpsestError`` are one JSON object on
    stdout too, with Click's exit code (2 for usage)."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        given = list(sys.argv[1:] if args is None else args)
        if not standalone_mode or not _wants_json(given):
            return super().main(given, prog_name, complete_var, standalone_mode,
                                windows_expand_args, **extra)
        try:
            code = super().main(given, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.TyperException as error:  # Click's usage errors (exit code 2) among them
            usage = error.exit_code == REFUSED
            fail(True, "usage_error" if usage else "error", error.format_message(),
                 exit_code=error.exit_code)
        except typer.Abort:
            fail(True, "aborted", "aborted", exit_code=FAILED)
        except PalimpsestError as error:
            fail(True, _code(error), str(error), retryable=error.retryable,
                 exit_code=FAILED if error.retryable else REFUSED)
        raise SystemExit(code if isinstance(code, int) else 0)


# --- status over the wire ------------------------------------------------------------------------


def _print_status(answer: dict[str, Any]) -> None:
    typer.echo(f"tenant {answer['tenant_id']} (key {answer['key_id']}: {', '.join(answer['scopes'])})")
    typer.echo(f"read models at position {answer['projected_position']}, "
               f"{answer['pending_writes']} write(s) not projected yet, {answer['parked']} parked")
    pipeline = answer.get("pipeline")
    if pipeline:
        typer.echo(f"your newest event {pipeline['head']}: projection lag "
                   f"{pipeline['projection_lag']}, {pipeline.get('requests_pending', 0)} "
                   "parked-event request(s) pending")
        typer.echo(", ".join(f"{role} {state}" for role, state in pipeline["liveness"].items()))
    ingest = answer.get("ingest")
    if ingest:
        turns = ", ".join(f"{n} {status}" for status, n in ingest["turns"].items())
        typer.echo(f"ingested turns: {turns}; extraction {'on' if ingest['extraction'] else 'off'}"
                   + (f" ({ingest['note']})" if ingest.get("note") else ""))


def server_status(url: str | None, key: str | None, as_json: bool, prometheus: bool) -> None:
    """``palimpsest status`` with a server named: the key's tenant as the server sees it, and the
    pipeline's lag and liveness (``--prometheus``: the server's ``/metrics``, for a key with
    ``memory:admin`` or the metrics token as the key)."""
    with remote(url, key, as_json) as server:
        answer: Any = server.metrics() if prometheus else server.status()
    if prometheus:
        typer.echo(answer, nl=False)
        return
    emit(answer, as_json, _print_status)
