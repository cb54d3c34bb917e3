"""``palimpsest cards``: the key's tenant's cards listed or counted along the six axes
(``services.query.slicing``), over a running server (``GET /v1/cards``, ``/v1/cards/count``) like the
other read commands: ``--url``, ``--key``, ``--json``, the errors and exit codes of
:mod:`services.entrypoints.cli.remote`.

    palimpsest cards --kind knowledge --recorded-during "this month"     a listing
    palimpsest cards --group-by agent_id                                 counts per agent
    palimpsest cards --concept JWT --edge contradicts                    what contradicts JWT

List options repeat (``--kind state --kind event``: either). A page holds ``--limit`` cards; the
next one is ``--cursor`` with what the page printed (``--all``: every page). ``--min-position N``
(a write's position) waits, bounded, until the read models include that write. ``--json`` prints
the server's answer: the page (``{"cards", "next_cursor"}``), or the counts.
"""

from __future__ import annotations

from typing import Any

import typer

from services.entrypoints.cli.queries import MinPosition
from services.entrypoints.cli.remote import AsJson, Key, Moment, Url, Wide, emit, fail, remote, table, when


def _many(help: str) -> Any:
    return typer.Option(None, help=f"{help} (repeatable: any of them)")


Kinds = _many("state, event, knowledge")
Types = typer.Option(None, "--type", "--memory-type", help="fact, preference, decision, commitment, "
                     "blocker, pattern, note, event (repeatable: any of them)")
Scopes = _many("personal, project, group, global")
Projects = _many("A project id")
Groups = _many("A group id")
Subjects = _many("A subject, exactly (e.g. user)")
Labels = _many("A state's slot label (e.g. address)")
Agents = _many("The writing agent's id")
Sessions = _many("The writing session's id")
Sources = _many("user_stated, agent_inferred, imported")
Tags = _many("A tag")
#: Was ``--tenant`` (the read models of this machine): the tenant is now the key's.
Tenant = typer.Option(None, "--tenant", hidden=True)


def _print_page(page: dict[str, Any], wide: bool) -> None:
    if not page["cards"]:
        typer.echo("(no cards)")
    else:
        table(("id", "kind", "recorded", "scope", "agent", "source", "content"),
              [(c["card_id"], f"{c['kind']}/{c['memory_type']}", when(c["recorded_at"]), _scope(c),
                c.get("agent_id"), _source(c), _content(c)) for c in page["cards"]],
              wrap=("content",), optional=("agent", "source", "scope", "recorded", "kind"), wide=wide)
    if page.get("next_cursor"):
        typer.echo(f"more: --cursor {page['next_cursor']}")


def _scope(card: dict[str, Any]) -> str:
    where = card.get("project_id") or card.get("group_id")
    return card["scope"] + (f":{where}" if where else "")


def _source(card: dict[str, Any]) -> str:
    sure = card.get("inference_confidence")
    return card["source"] + (f" {sure:.2f}" if sure is not None else "")


def _content(card: dict[str, Any]) -> str:
    if card.get("content") is None:
        text = "(erased)"
    else:
        text = (f"{card['title']}: " if card.get("title") else "") + card["content"]
    return text + (" [superseded]" if card.get("superseded") else "")


def _print_counts(counts: dict[str, Any], wide: bool) -> None:
    if counts.get("group_by"):
        table((counts["group_by"], "cards"), [(c["key"], c["count"]) for c in counts["counts"]],
              wide=wide)
    typer.echo(f"total: {counts['total']}")


def register(cli: typer.Typer) -> None:
    """Add ``palimpsest cards`` to the command line."""

    @cli.command()
    def cards(
        kind: list[str] = Kinds,
        memory_type: list[str] = Types,
        subject: list[str] = Subjects,
        subject_prefix: str = typer.Option(None, help="Cards of this subject or any below it "
                                           "(its segments separated by ':')."),
        label: list[str] = Labels,
        valid_from: str = Moment("Cards valid at some time from"),
        valid_to: str = Moment("... to (exclusive)"),
        recorded_after: str = Moment("Recorded at or after"),
        recorded_before: str = Moment("Recorded before"),
        occurred_after: str = Moment("Events that occurred at or after"),
        occurred_before: str = Moment("Events that occurred before"),
        recorded_during: str = typer.Option(None, help="Recorded within: this month, 上個月, "
                                            "last week, in April, since May."),
        occurred_during: str = typer.Option(None, help="Events that occurred within one."),
        time_zone: str = typer.Option(None, envvar="PALIMPSEST_TIME_ZONE", show_default=False,
                                      help="The zone of those words and of month_recorded, e.g. "
                                      "Asia/Taipei (default: PALIMPSEST_TIME_ZONE, else UTC)."),
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
                                     "group_id, agent_id, session_id, source, tag, subject, label "
                                     "or month_recorded (the server says which it knows)."),
        count: bool = typer.Option(False, "--count", help="Count instead of listing."),
        limit: int = typer.Option(None, min=1, max=500, show_default=False,
                                  help="Cards per page (default 50)."),
        cursor: str = typer.Option(None, help="The page after the one that printed it."),
        every: bool = typer.Option(False, "--all", help="Every page, one after the other."),
        min_position: int = MinPosition, tenant: str = Tenant,
        wide: bool = Wide, url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """List or count the key's tenant's cards along the six axes: kind, time, scope, source,
        confidence, relation, concept; current, or as of a past moment."""
        if tenant is not None:
            fail(as_json, "usage_error", "--tenant is gone: cards are read over the server, and "
                 "the tenant is the key's (--key or PALIMPSEST_KEY)")
        options = {
            "kinds": kind, "memory_types": memory_type, "subjects": subject,
            "subject_prefix": subject_prefix, "labels": label,
            "valid_from": valid_from, "valid_to": valid_to,
            "recorded_after": recorded_after, "recorded_before": recorded_before,
            "occurred_after": occurred_after, "occurred_before": occurred_before,
            "recorded_during": recorded_during, "occurred_during": occurred_during,
            "time_zone": time_zone, "scopes": scope, "project_ids": project, "group_ids": group,
            "agent_ids": agent, "session_ids": session, "sources": source,
            "confidence_below": confidence_below, "confidence_above": confidence_above,
            "related_to": related_to, "edge": edge, "related_concept": concept, "tags": tag,
            "valid_at": valid_at, "known_at": known_at,
            "include_superseded": include_superseded or None, "group_by": group_by,
            "min_position": min_position}
        given = {name: value for name, value in options.items() if value not in (None, [])}
        with remote(url, key, as_json) as server:
            if count or group_by:
                counted = server.count_cards(**given)
            else:
                page = server.cards(**given, limit=limit, cursor=cursor)
                while every and page.get("next_cursor"):
                    more = server.cards(**given, limit=limit, cursor=page["next_cursor"])
                    page = {**more, "cards": page["cards"] + more["cards"]}
        if count or group_by:
            emit(counted, as_json, lambda c: _print_counts(c, wide))
        else:
            emit(page, as_json, lambda p: _print_page(p, wide))
