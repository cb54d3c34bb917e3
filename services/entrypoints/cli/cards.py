"""``palimpsest cards``: a tenant's cards listed or counted along the six axes (``services.slicing``),
read from the read models on this machine.

    palimpsest cards --tenant T --kind knowledge --recorded-after 2026-06-01      a listing
    palimpsest cards --tenant T --group-by agent_id                              counts per agent
    palimpsest cards --tenant T --concept JWT --edge contradicts                 what contradicts JWT

List options repeat (``--kind state --kind event``: either). ``--json`` prints one object (the
page, or the counts); an error is ``{"error": {"code", "message", "retryable"}}`` with exit code 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from pydantic import BaseModel, ValidationError

from domain.errors import PalimpsestError
from services.entrypoints.cli.remote import AsJson, Moment, fail, table, when

Tenant = typer.Option(..., "--tenant", envvar="PALIMPSEST_TENANT", help="The tenant to read.")


def _many(help: str) -> Any:
    return typer.Option(None, help=f"{help} (repeatable: any of them)")


Kinds = _many("state, event, knowledge")
Types = _many("fact, preference, decision, commitment, blocker, pattern, note, event")
Scopes = _many("personal, project, group, global")
Projects = _many("A project id")
Groups = _many("A group id")
Agents = _many("The writing agent's id")
Sessions = _many("The writing session's id")
Sources = _many("user_stated, agent_inferred, imported")
Tags = _many("A tag")


@contextmanager
def read_models(as_json: bool) -> Iterator[tuple[Any, str]]:
    """The read models as the runtime role, and the configured zone; a refused slice becomes
    :func:`fail` (exit code 2)."""
    from infra.postgres import admin_database, bootstrap, runtime_database
    from infra.settings import Settings
    from services.entrypoints.errors import answer
    from services.readmodels import ReadModels

    try:
        settings = Settings()
        admin = admin_database(settings)
        if settings.auto_bootstrap:
            bootstrap(admin, settings)
        read = ReadModels(runtime_database(admin, settings), settings.read_schema, pool_size=1)
        try:
            yield read, settings.time_zone
        finally:
            read.close()
    except (PalimpsestError, ValidationError) as error:
        found = answer(error)
        fail(as_json, found.code, found.message, status=found.status, retryable=found.retryable)


def _emit(answer: BaseModel, as_json: bool, human: Callable[[Any], None]) -> None:
    if as_json:
        typer.echo(json.dumps(answer.model_dump(mode="json"), ensure_ascii=False))
    else:
        human(answer)


def _print_page(page: Any) -> None:
    for c in page.cards:
        where = c.scope + (f":{c.project_id or c.group_id}" if c.project_id or c.group_id else "")
        sure = f" {c.inference_confidence:.2f}" if c.inference_confidence is not None else ""
        text = "(erased)" if c.content is None else (f"{c.title}: " if c.title else "") + c.content
        typer.echo(f"{when(c.recorded_at.isoformat())}  {c.card_id}  {c.kind}/{c.memory_type}  "
                   f"{where}  {c.agent_id or '—'}  {c.source}{sure}  {text!r}"
                   + ("  [superseded]" if c.superseded else ""))
    if not page.cards:
        typer.echo("(no cards)")
    if page.next_cursor:
        typer.echo(f"more: --cursor {page.next_cursor}")


def _print_counts(counts: Any) -> None:
    if counts.group_by:
        table([counts.group_by, "cards"], [(c.key, c.count) for c in counts.counts])
    typer.echo(f"total: {counts.total}")


def register(cli: typer.Typer) -> None:
    """Add ``palimpsest cards`` to the command line."""

    @cli.command()
    def cards(
        tenant: str = Tenant,
        kind: list[str] = Kinds,
        memory_type: list[str] = Types,
        valid_from: str = Moment("Cards valid at some time from"),
        valid_to: str = Moment("... to (exclusive)"),
        recorded_after: str = Moment("Recorded at or after"),
        recorded_before: str = Moment("Recorded before"),
        occurred_after: str = Moment("Events that occurred at or after"),
        occurred_before: str = Moment("Events that occurred before"),
        recorded_during: str = typer.Option(None, help="Recorded within: this month, 上個月, "
                                            "last week, in April, since May."),
        occurred_during: str = typer.Option(None, help="Events that occurred within one."),
        time_zone: str = typer.Option(None, help="The zone of those words and of "
                                      "month_recorded (default: PALIMPSEST_TIME_ZONE)."),
        scope: list[str] = Scopes,
        project: list[str] = Projects,
        group: list[str] = Groups,
        agent: list[str] = Agents,
        session: list[str] = Sessions,
        source: list[str] = Sources,
        confidence_below: float = typer.Option(None, help="inference_confidence below this."),
        confidence_above: float = typer.Option(None, help="inference_confidence above this."),
        related_to: str = typer.Option(None, help="Cards linked to this card id, either way."),
        edge: str = typer.Option(None, help="The link's edge type (alone: cards with one)."),
        concept: str = typer.Option(None, help="Cards linked to the knowledge card of a concept."),
        tag: list[str] = Tags,
        valid_at: str = Moment("As of: the world time asked about"),
        known_at: str = Moment("As of: what was known at this time"),
        include_superseded: bool = typer.Option(False, help="Every card, not only current ones."),
        group_by: str = typer.Option(None, help="Count per kind, memory_type, scope, project_id, "
                                     "group_id, agent_id, session_id, source, tag, month_recorded."),
        count: bool = typer.Option(False, "--count", help="Count instead of listing."),
        limit: int = typer.Option(50, help="Cards per page (at most 500)."),
        cursor: str = typer.Option(None, help="The page after the one that printed it."),
        as_json: bool = AsJson,
    ) -> None:
        """List or count cards along the six axes: kind, time, scope, source, confidence,
        relation, concept; current, or as of a past moment."""
        from services.slicing import CardSlice, count_cards, list_cards

        with read_models(as_json) as (read, zone):
            slice = CardSlice.model_validate({
                "kinds": kind, "memory_types": memory_type,
                "valid_from": valid_from, "valid_to": valid_to,
                "recorded_after": recorded_after, "recorded_before": recorded_before,
                "occurred_after": occurred_after, "occurred_before": occurred_before,
                "recorded_during": recorded_during, "occurred_during": occurred_during,
                "time_zone": time_zone or zone,
                "scopes": scope, "project_ids": project, "group_ids": group,
                "agent_ids": agent, "session_ids": session,
                "sources": source, "confidence_below": confidence_below,
                "confidence_above": confidence_above,
                "related_to": related_to, "edge": edge, "related_concept": concept, "tags": tag,
                "as_of": {"valid_at": valid_at, "known_at": known_at}
                if valid_at or known_at else None,
                "include_superseded": include_superseded, "group_by": group_by, "limit": limit,
                "cursor": cursor})
            if count or group_by:
                counted = count_cards(read, tenant, slice)
                _emit(counted, as_json, _print_counts)
            else:
                _emit(list_cards(read, tenant, slice), as_json, _print_page)
