"""The query commands of ``palimpsest``: search, facts, history, briefing, context.

Each takes ``--tenant`` (or ``PALIMPSEST_TENANT``) and ``--json``; with ``--json`` the answer is
one JSON object on stdout, and an error is ``{"error": …, "type": …}`` with exit code 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import typer
from pydantic import BaseModel

from domain.errors import InvalidCommandError, PalimpsestError
from infra.settings import Settings

Tenant = typer.Option(..., "--tenant", envvar="PALIMPSEST_TENANT", help="The tenant to read.")
AsJson = typer.Option(False, "--json", help="One JSON object on stdout.")
Project = typer.Option(None, "--project", help="The current project (its cards rank first).")
Groups = typer.Option([], "--group", help="Groups whose cards to include (repeatable).")


def _moment(text: str | None, zone: ZoneInfo, name: str) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidCommandError(f"{name}: not an ISO 8601 time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=zone)


def _dump(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, list):
        value = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    return json.dumps(value, ensure_ascii=False, default=str, indent=2)


@contextmanager
def _queries(as_json: bool) -> Iterator[Any]:
    """The query side for one command; errors become JSON (with ``--json``) and exit code 2."""
    from services.factory import create_queries

    try:
        queries = create_queries(Settings())
        try:
            yield queries
        finally:
            queries.close()
    except PalimpsestError as error:
        if not as_json:
            raise
        typer.echo(json.dumps({"error": str(error), "type": type(error).__name__}, ensure_ascii=False))
        raise SystemExit(2) from None


def _when(moment: datetime | None, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M") if moment else "—"


def _print_search(result: Any, zone: ZoneInfo, explain: bool) -> None:
    if result.as_of:
        typer.echo(f"as of: valid {_when(result.valid_at, zone)}, known {_when(result.known_at, zone)}")
    for rank, card in enumerate(result.results, start=1):
        slot = f"{card.subject}/{card.label}" if card.label else card.memory_type
        when = (f"occurred {_when(card.occurred_at, zone)}" if card.kind == "event" else
                f"valid {_when(card.valid_from, zone)} → {_when(card.valid_to, zone)}")
        flag = "  [superseded]" if card.superseded else ""
        typer.echo(f"{rank}. {card.value!r}  ({card.kind}, {card.scope}, {slot}; {when}; "
                   f"recorded {_when(card.recorded_at, zone)}; {card.source}) score {card.score:.4f}{flag}")
        if explain and card.explain:
            typer.echo("     " + json.dumps(card.explain, ensure_ascii=False, default=str))
    if not result.results:
        typer.echo("(nothing found)")
    alerts = result.alerts
    for c in alerts.contradictions:
        typer.echo(f"contradiction: {c.card_ids[0]} vs {c.card_ids[1]}: {c.reason}")
    for a in alerts.arbitrations:
        typer.echo(f"pending arbitration on {a.subject}/{a.label}: current {', '.join(a.current_values)}"
                   f", proposed {a.proposed_value} ({a.reason})")
    for card_id in alerts.aging_facts:
        typer.echo(f"aging fact (unverified ≥ 180 days): {card_id}")
    for card_id in alerts.stale_knowledge:
        typer.echo(f"possibly outdated knowledge: {card_id}")
    routes = ", ".join(f"{name} {r.status}" + (f" {r.hits} in {r.ms:.0f} ms" if r.status == "ok" else "")
                       for name, r in result.diagnostics.routes.items())
    typer.echo(f"routes: {routes}; {result.diagnostics.total_ms:.0f} ms")


def register(cli: typer.Typer) -> None:
    """Add the query commands to the ``palimpsest`` command line."""

    def command(function: Callable[..., None]) -> Callable[..., None]:
        return cli.command()(function)

    @command
    def search(
        query: str = typer.Argument(..., help="The question, in Chinese or English."),
        tenant: str = Tenant, project: str = Project,
        group: list[str] = Groups,
        include_global: bool = typer.Option(False, "--global", help="Include global cards."),
        valid_at: str = typer.Option(None, help="As-of: the world time asked about (ISO 8601)."),
        known_at: str = typer.Option(None, help="As-of: what we knew at this time (ISO 8601)."),
        now: str = typer.Option(None, help="The clock relative words resolve against (ISO 8601)."),
        top: int = typer.Option(None, help="Cards to return (default PALIMPSEST_RETRIEVAL__TOP_N)."),
        explain: bool = typer.Option(False, help="Each card's route ranks and every scoring step."),
        as_json: bool = AsJson,
    ) -> None:
        """Fused retrieval over the five routes, current or as of a past moment."""
        with _queries(as_json) as q:
            request = q.query(query, now=_moment(now, q.zone, "--now"), project_id=project,
                              group_ids=tuple(group), include_global=include_global,
                              valid_at=_moment(valid_at, q.zone, "--valid-at"),
                              known_at=_moment(known_at, q.zone, "--known-at"), explain=explain, top_n=top)
            result = q.search(tenant, request)
            if as_json:
                typer.echo(_dump(result))
            else:
                _print_search(result, q.zone, explain)

    @command
    def facts(
        subject: str = typer.Argument(..., help="Whose facts, e.g. user."),
        tenant: str = Tenant,
        valid_at: str = typer.Option(None, help="Facts valid at this time (ISO 8601)."),
        known_at: str = typer.Option(None, help="As we knew them at this time (ISO 8601)."),
        as_json: bool = AsJson,
    ) -> None:
        """The facts of a subject valid now, or as of a past moment."""
        with _queries(as_json) as q:
            found = q.facts(tenant, subject, _moment(valid_at, q.zone, "--valid-at"),
                            _moment(known_at, q.zone, "--known-at"))
            if as_json:
                typer.echo(_dump({"subject": subject, "facts": [f.model_dump(mode="json") for f in found]}))
                return
            for f in found:
                typer.echo(f"{f.label:<16} {f.value!r}  (valid {_when(f.valid_from, q.zone)} → "
                           f"{_when(f.valid_to, q.zone)}, {f.cardinality}, {f.source})")
            if not found:
                typer.echo("(no facts)")

    @command
    def history(
        ref: str = typer.Argument(..., metavar="SLOT_OR_CARD",
                                  help="A card id, a slot id, or subject/label (e.g. user/address)."),
        tenant: str = Tenant, as_json: bool = AsJson,
    ) -> None:
        """Every version of a card or slot, on both timelines, with what changed."""
        with _queries(as_json) as q:
            cards = q.history(tenant, ref)
            if as_json:
                typer.echo(_dump({"ref": ref, "cards": [c.model_dump(mode="json") for c in cards]}))
                return
            for card in cards:
                typer.echo(f"■ {card.card_id}  {card.kind}/{card.memory_type}  "
                           f"{card.subject or ''}/{card.label or ''}")
                for v in card.versions:
                    typer.echo(f"  v{v.version} {v.value!r:<28} valid {_when(v.valid_from, q.zone)} → "
                               f"{_when(v.valid_to, q.zone)}  known {_when(v.known_from, q.zone)} → "
                               f"{_when(v.known_to, q.zone)}  {v.change}")

    @command
    def briefing(tenant: str = Tenant, project: str = Project, as_json: bool = AsJson) -> None:
        """Open, waiting and overdue commitments, blockers, pending arbitrations, aging facts,
        stale knowledge."""
        with _queries(as_json) as q:
            report = q.briefing(tenant, project)
            if as_json:
                typer.echo(_dump({**report.model_dump(mode="json"), "counts": report.counts}))
                return
            for name, count in report.counts.items():
                typer.echo(f"{name.replace('_', ' ')}: {count}")
                for item in getattr(report, name):
                    value = item.value if hasattr(item, "value") else (
                        f"{item['subject']}/{item['label']}: {item['current_values']} vs "
                        f"{item['proposed_value']} ({item['reason']})")
                    typer.echo(f"  - {value}")

    @command
    def context(
        query: str = typer.Argument(..., help="The question the assistant is answering."),
        tenant: str = Tenant, project: str = Project,
        valid_at: str = typer.Option(None, help="As-of: the world time asked about (ISO 8601)."),
        known_at: str = typer.Option(None, help="As-of: what we knew at this time (ISO 8601)."),
        as_json: bool = AsJson,
    ) -> None:
        """The prompt blocks for a question: current time, cards, aging facts, alerts."""
        from services.context import render

        with _queries(as_json) as q:
            result = q.search(tenant, q.query(query, project_id=project,
                                              valid_at=_moment(valid_at, q.zone, "--valid-at"),
                                              known_at=_moment(known_at, q.zone, "--known-at")))
            text = render(result, q.zone)
            typer.echo(_dump({"context": text}) if as_json else text)
