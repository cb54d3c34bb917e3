"""``palimpsest forget`` and ``palimpsest export``: forgetting on request, and a tenant's or a
subject's cards as JSON lines (DESIGN §7).

    palimpsest forget card CARD_ID                        one card (memory:write)
    palimpsest forget slot --subject S --label L          everything under a label (memory:write)
    palimpsest forget subject S                           a person: all of it (memory:erase)
    palimpsest forget session SESSION_ID                  an ingested session (memory:erase)
    palimpsest forget tenant --yes                        the whole tenant (memory:erase)
        [--reason TEXT] [--basis gdpr-17] [--request-id ID]
    palimpsest export [--subject S] [--output FILE]       JSON lines; erased cards as tombstones

Over a running server by default, as the other client commands (``--url``, ``--key``, ``--json``;
the tenant is the key's, and who asked is the key): a card or a slot needs a key with
``memory:write``, a subject, a session or the tenant one with ``memory:erase`` — a refusal exits
with code 2 and ``permission_denied``, and nothing is forgotten. With ``--tenant T`` they work
locally on the
data folder's store (``--data-dir``, or ``PALIMPSEST_DATABASE_URL``), as ``keys`` does: no server
and no key — the operator's own hand; who asked is ``--by``. A data folder without a database is
refused, never made. A running ``serve`` (or ``pipeline``) projects a local erasure. A tenant is
forgotten only with ``--yes``: it cannot be undone.

``export`` writes the lines to stdout, or to ``--output FILE`` (through ``FILE.partial``, renamed
once complete) and then says how many it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import typer

from services.entrypoints.cli import local
from services.entrypoints.cli.local import DataDir
from services.entrypoints.cli.mcp import stdout_to_stderr
from services.entrypoints.cli.remote import REFUSED, AsJson, Key, Url, emit, fail, remote

forget = typer.Typer(no_args_is_help=True, help="Forget a card or a slot (over a server, a key "
                     "with memory:write), or a subject, an ingested session or the whole tenant "
                     "(a key with memory:erase): its keys are destroyed, its cards become "
                     "tombstones; the erasure itself is kept.")

Tenant = typer.Option(None, "--tenant", show_default=False, help="Work on this tenant, "
                      f"{local.LOCAL} (no server, no key); default: over the server.")
Reason = typer.Option("", "--reason", help="Why (sealed with the tenant's key; no personal text).")
Basis = typer.Option("request", "--basis", help="The legal basis or kind of request, e.g. gdpr-17.")
RequestId = typer.Option(None, "--request-id", help="Erases once: a retry with the same id "
                         "answers the same.")
Output = typer.Option(None, "--output", "-o", help="Write the lines to this file (default: stdout).")
By = typer.Option("cli", "--by", help="Who asks, with --tenant (kept in the clear: a role or an "
                  "id, no name); over a server it is the key.")


def _print_erasure(answer: Mapping[str, Any]) -> None:
    cards = answer.get("card_ids") or []
    typer.echo(f"erased {answer['unit']}: {answer['keys_destroyed']} key(s) destroyed, "
               f"{len(cards)} card(s) forgotten; erasure {answer['erasure_id']}"
               + (f", position {answer['position']}" if answer.get("position") is not None else "")
               + ("; answered from an earlier identical request" if answer.get("replayed") else ""))


@dataclass(frozen=True)
class Asked:
    """What every ``forget`` command takes beside its unit: why, and where it runs."""

    tenant: str | None
    reason: str
    basis: str
    request_id: str | None
    by: str
    url: str | None
    key: str | None
    as_json: bool
    data_dir: Path | None = None


def _forget(unit: str, fields: dict[str, Any], asked: Asked) -> None:
    """Erase ``unit`` over the server, or locally with ``--tenant``; print the erasure."""
    given = {"unit": unit, **{k: v for k, v in fields.items() if v is not None},
             "reason": asked.reason, "basis": asked.basis,
             **({"request_id": asked.request_id} if asked.request_id else {})}
    if asked.tenant is not None:
        answer = _local_erase(asked.tenant, given, asked.by, asked.as_json, asked.data_dir)
    else:
        with remote(asked.url, asked.key, asked.as_json) as server:
            answer = server.forget(**given)
    emit(answer, asked.as_json, _print_erasure)


def _local_erase(tenant: str, fields: dict[str, Any], by: str, as_json: bool,
                 data_dir: Path | None) -> dict[str, Any]:
    """The erasure on the data folder's store, as the operator: no key, ``by`` asks."""
    from pydantic import ValidationError

    from domain.errors import PalimpsestError
    from services.command.commands import Erase
    from services.entrypoints.errors import answer
    from services.factory import create_app

    settings = local.settings(data_dir, as_json=as_json)
    try:
        with stdout_to_stderr():  # what the embedded server says on its start is not the answer
            app = create_app(settings)
        try:
            result = app.erase(tenant, Erase.model_validate({**fields, "requested_by": by}))
        finally:
            app.close()
    except (PalimpsestError, ValidationError) as error:
        found = answer(error)
        fail(as_json, found.code, found.message, status=found.status, retryable=found.retryable)
    return result.model_dump(mode="json")


@forget.command()
def card(card_id: str = typer.Argument(..., metavar="CARD_ID", help="The card's id."),
         tenant: str = Tenant, reason: str = Reason, basis: str = Basis,
         request_id: str = RequestId, by: str = By, data_dir: Path = DataDir,
         url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """Forget one card: its value, tags and embedding are gone; its id, times and edges stay.
    Over a server, a key with memory:write."""
    _forget("card", {"card_id": card_id},
            Asked(tenant, reason, basis, request_id, by, url, key, as_json, data_dir))


@forget.command()
def slot(subject: str = typer.Option(None, "--subject", help="The slot's subject, e.g. user."),
         label: str = typer.Option(None, "--label", help="The slot's label, e.g. address."),
         slot_id: str = typer.Option(None, "--slot-id", help="The slot's id, instead."),
         scope: str = typer.Option("personal", help="personal, project, group or global."),
         project: str = typer.Option(None, "--project", help="A project slot's project."),
         group: str = typer.Option(None, "--group", help="A group slot's group."),
         tenant: str = Tenant, reason: str = Reason, basis: str = Basis,
         request_id: str = RequestId, by: str = By, data_dir: Path = DataDir,
         url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """Forget a slot: every value ever stored under one label of one subject. Over a server, a
    key with memory:write."""
    _forget("slot", {"subject": subject, "label": label, "slot_id": slot_id, "scope": scope,
                     "project_id": project, "group_id": group},
            Asked(tenant, reason, basis, request_id, by, url, key, as_json, data_dir))


@forget.command()
def subject(name: str = typer.Argument(..., metavar="SUBJECT", help="Whom, e.g. user or 媽媽."),
            tenant: str = Tenant, reason: str = Reason, basis: str = Basis,
            request_id: str = RequestId, by: str = By, data_dir: Path = DataDir,
            url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """Forget a subject: every slot of theirs and what is linked to it. Over a server, a key
    with memory:erase."""
    _forget("subject", {"subject": name},
            Asked(tenant, reason, basis, request_id, by, url, key, as_json, data_dir))


@forget.command()
def session(session_id: str = typer.Argument(..., metavar="SESSION_ID",
                                             help="The ingested session's id."),
            tenant: str = Tenant, reason: str = Reason, basis: str = Basis,
            request_id: str = RequestId, by: str = By, data_dir: Path = DataDir,
            url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """Forget an ingested conversation session: its turns and what extraction made of them.
    Over a server, a key with memory:erase."""
    _forget("session", {"session_id": session_id},
            Asked(tenant, reason, basis, request_id, by, url, key, as_json, data_dir))


@forget.command("tenant")
def whole_tenant(yes: bool = typer.Option(False, "--yes", help="Yes: forget every card of the "
                                          "tenant; it cannot be undone."),
                 tenant: str = Tenant, reason: str = Reason, basis: str = Basis,
                 request_id: str = RequestId, by: str = By, data_dir: Path = DataDir,
                 url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """Forget the whole tenant (offboarding): over a server, a key with memory:erase."""
    if not yes:
        fail(as_json, "usage_error", "forgetting a whole tenant cannot be undone: add --yes",
             exit_code=REFUSED)
    _forget("tenant", {}, Asked(tenant, reason, basis, request_id, by, url, key, as_json, data_dir))


# --- export ----------------------------------------------------------------------------------


def export(subject: str = typer.Option(None, "--subject", help="Only this subject's cards."),
           output: Path = Output, tenant: str = Tenant, data_dir: Path = DataDir, url: str = Url,
           key: str = Key, as_json: bool = AsJson) -> None:
    """Every card of the tenant, or of a subject, as JSON lines: both timelines, edges,
    provenance; erased cards as tombstones ("erased": true, no text)."""
    with ExitStack() as stack:
        if tenant is not None:
            lines = _local_lines(stack, tenant, subject, as_json, data_dir)
            encode = _local_encode()
        else:
            server = stack.enter_context(remote(url, key, as_json))
            lines, encode = server.export(subject), _encode
        written = _write(lines, encode, output)
    if output is not None:
        emit({"exported": written[0], "erased": written[1], "output": str(output)}, as_json,
             lambda a: typer.echo(f"{a['exported']} card(s), {a['erased']} erased, written to "
                                  f"{a['output']}"))


def _local_lines(stack: ExitStack, tenant: str, subject: str | None, as_json: bool,
                 data_dir: Path | None) -> Iterator[dict[str, Any]]:
    """The lines from this machine's read models, open until ``stack`` closes."""
    from services.query.export import cards

    settings = local.settings(data_dir, as_json=as_json)
    with stdout_to_stderr():
        read = stack.enter_context(local.read_models(settings, as_json))
    return stack.enter_context(closing(cards(read, tenant, subject)))


def _local_encode() -> Callable[[Mapping[str, Any]], str]:
    from services.query.export import encode

    return encode


def _encode(line: Mapping[str, Any]) -> str:
    return json.dumps(line, ensure_ascii=False)


def _write(lines: Iterable[Mapping[str, Any]], encode: Callable[[Mapping[str, Any]], str],
           output: Path | None) -> tuple[int, int]:
    """The lines to ``output`` (through ``output.partial``, renamed once all are written) or to
    stdout: (how many, how many erased)."""
    if output is None:
        return _lines_to(lines, encode, lambda text: typer.echo(text, nl=False))
    partial = output.with_name(output.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as stream:
            written = _lines_to(lines, encode, _writer(stream))
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return written


def _writer(stream: IO[str]) -> Callable[[str], None]:
    def write(text: str) -> None:
        stream.write(text)
    return write


def _lines_to(lines: Iterable[Mapping[str, Any]], encode: Callable[[Mapping[str, Any]], str],
              out: Callable[[str], None]) -> tuple[int, int]:
    count = erased = 0
    for line in lines:
        out(encode(line) + "\n")
        count += 1
        erased += bool(line.get("erased"))
    return count, erased


def register(cli: typer.Typer) -> None:
    """Add ``palimpsest forget`` and ``palimpsest export`` to the command line."""
    cli.add_typer(forget, name="forget")
    cli.command("export")(export)
