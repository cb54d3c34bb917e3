"""The query commands of ``palimpsest``: search, facts, history, briefing, context — thin clients
of a running server (``palimpsest serve``), with the options, errors and exit codes of
:mod:`services.entrypoints.cli.remote`. The tenant is the key's; with ``--json`` the answer is the
server's JSON object as is.

``--min-position N`` (a write's ``position``) makes the server wait, bounded, until its read models
include that write, so a read right after a write sees it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import typer

from services.entrypoints.cli.remote import AsJson, Key, Moment, Url, Wide, emit, remote, table, when

Project = typer.Option(None, "--project", help="The current project (its cards rank first).")
Groups = typer.Option([], "--group", help="Groups whose cards to include (repeatable).")
Types = typer.Option([], "--type", help="Only these memory types (repeatable).")
MinPosition = typer.Option(None, "--min-position", min=0,
                           help="Wait until the read models include this write's position.")


def _print_search(result: dict[str, Any], explain: bool) -> None:
    if result.get("valid_at") or result.get("known_at"):
        typer.echo(f"as of: valid {when(result['valid_at'])}, known {when(result['known_at'])}")
    for rank, card in enumerate(result["results"], start=1):
        slot = f"{card['subject']}/{card['label']}" if card["label"] else card["memory_type"]
        span = (f"occurred {when(card['occurred_at'])}" if card["kind"] == "event" else
                f"valid {when(card['valid_from'])} → {when(card['valid_to'])}")
        flag = "  [superseded]" if card["superseded"] else ""
        typer.echo(f"{rank}. {card['value']!r}  ({card['kind']}, {card['scope']}, {slot}; {span}; "
                   f"recorded {when(card['recorded_at'])}; {card['source']}) "
                   f"score {card['score']:.4f}{flag}")
        if explain and card.get("explain"):
            typer.echo("     " + json.dumps(card["explain"], ensure_ascii=False))
    if not result["results"]:
        typer.echo("(nothing found)")
    elif result.get("match") == "weak":
        typer.echo("(a weak match: nothing matched the question; these are the nearest cards)")
    alerts = result["alerts"]
    for c in alerts["contradictions"]:
        typer.echo(f"contradiction: {c['card_ids'][0]} vs {c['card_ids'][1]}: {c['reason']}")
    for a in alerts["arbitrations"]:
        typer.echo(f"pending arbitration {a['case_id']} on {a['subject']}/{a['label']}: current "
                   f"{', '.join(a['current_values'])}, proposed {a['proposed_value']} ({a['reason']})")
    for card_id in alerts["aging_facts"]:
        typer.echo(f"aging fact (unverified ≥ 180 days): {card_id}")
    for card_id in alerts["stale_knowledge"]:
        typer.echo(f"possibly outdated knowledge: {card_id}")
    routes = ", ".join(f"{name} {r['status']}" + (f" {r['hits']} in {r['ms']:.0f} ms"
                                                  if r["status"] == "ok" else "")
                       for name, r in result["diagnostics"]["routes"].items())
    typer.echo(f"routes: {routes}; {result['diagnostics']['total_ms']:.0f} ms")


def _print_facts(answer: dict[str, Any], wide: bool) -> None:
    if not answer["facts"]:
        typer.echo("(no facts)")
        return
    table(("label", "value", "valid from", "valid to", "cardinality", "source"),
          [(f["label"], f["value"], when(f["valid_from"]), when(f["valid_to"]), f["cardinality"],
            f["source"]) for f in answer["facts"]],
          wrap=("value",), optional=("source", "cardinality", "valid to"), wide=wide)


def _print_history(answer: dict[str, Any]) -> None:
    for card in answer["cards"]:
        typer.echo(f"■ {card['card_id']}  {card['kind']}/{card['memory_type']}  "
                   f"{card['subject'] or ''}/{card['label'] or ''}")
        for v in card["versions"]:
            value = "(erased)" if v["value"] is None else repr(v["value"])
            typer.echo(f"  v{v['version']} {value:<28} valid {when(v['valid_from'])} → "
                       f"{when(v['valid_to'])}  known {when(v['known_from'])} → "
                       f"{when(v['known_to'])}  {v['change']}")


_BRIEFING = ("open", "waiting", "overdue", "blockers", "arbitrations", "aging_facts", "stale_knowledge")


def _print_briefing(report: dict[str, Any]) -> None:
    for name in _BRIEFING:
        items = report[name]
        typer.echo(f"{name.replace('_', ' ')}: {len(items)}")
        for item in items:
            value = item["value"] if "value" in item else (
                f"{item['subject']}/{item['label']}: {item['current_values']} vs "
                f"{item['proposed_value']} ({item['reason']})")
            due = f" (due {when(item['due_at'])})" if item.get("due_at") else ""
            typer.echo(f"  - {value}{due}")


def register(cli: typer.Typer) -> None:
    """Add the query commands to the ``palimpsest`` command line."""

    def command(function: Callable[..., None]) -> Callable[..., None]:
        return cli.command()(function)

    @command
    def search(
        query: str = typer.Argument(..., help="The question, in Chinese or English."),
        project: str = Project, group: list[str] = Groups,
        include_global: bool = typer.Option(False, "--global", help="Include global cards."),
        memory_type: list[str] = Types,
        valid_at: str = Moment("As-of: the world time asked about"),
        known_at: str = Moment("As-of: what we knew at this time"),
        now: str = Moment("The clock relative words resolve against"),
        top: int = typer.Option(None, min=1, max=50, help="Cards to return (default: the "
                                "server's PALIMPSEST_RETRIEVAL__TOP_N)."),
        explain: bool = typer.Option(False, help="Each card's route ranks and every scoring step."),
        min_position: int = MinPosition, url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Fused retrieval over the five routes, current or as of a past moment."""
        with remote(url, key, as_json) as server:
            result = server.search(query, valid_at=valid_at, known_at=known_at, now=now,
                                   project_id=project, group_ids=group or None,
                                   include_global=include_global or None,
                                   memory_types=memory_type or None, top_n=top,
                                   explain=explain or None, min_position=min_position)
        emit(result, as_json, lambda r: _print_search(r, explain))

    @command
    def facts(
        subject: str = typer.Argument(..., help="Whose facts, e.g. user."),
        valid_at: str = Moment("Facts valid at this time"),
        known_at: str = Moment("As we knew them at this time"),
        min_position: int = MinPosition, wide: bool = Wide, url: str = Url, key: str = Key,
        as_json: bool = AsJson,
    ) -> None:
        """The facts of a subject valid now, or as of a past moment."""
        with remote(url, key, as_json) as server:
            answer = server.facts(subject, valid_at=valid_at, known_at=known_at,
                                  min_position=min_position)
        emit(answer, as_json, lambda a: _print_facts(a, wide))

    @command
    def history(
        ref: str = typer.Argument(..., metavar="SLOT_OR_CARD",
                                  help="A card id, a slot id, or subject/label (e.g. user/address)."),
        min_position: int = MinPosition, url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Every version of a card or slot, on both timelines, with what changed."""
        with remote(url, key, as_json) as server:
            answer = server.history(ref, min_position=min_position)
        emit(answer, as_json, _print_history)

    @command
    def briefing(project: str = Project, min_position: int = MinPosition, url: str = Url,
                 key: str = Key, as_json: bool = AsJson) -> None:
        """Open, waiting and overdue commitments, blockers, pending arbitrations, aging facts,
        stale knowledge."""
        with remote(url, key, as_json) as server:
            report = server.briefing(project_id=project, min_position=min_position)
        emit(report, as_json, _print_briefing)

    @command
    def context(
        query: str = typer.Argument(..., help="The question the assistant is answering."),
        project: str = Project,
        valid_at: str = Moment("As-of: the world time asked about"),
        known_at: str = Moment("As-of: what we knew at this time"),
        min_position: int = MinPosition, url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """The prompt blocks for a question: current time, cards, aging facts, alerts."""
        with remote(url, key, as_json) as server:
            answer = server.context(query, valid_at=valid_at, known_at=known_at, project_id=project,
                                    min_position=min_position)
        emit(answer, as_json, lambda a: typer.echo(a["text"]))
