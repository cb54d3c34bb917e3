"""The write commands of ``palimpsest`` over a running server: remember, revise, correct, verify,
link, move, and ``arbitrations`` (list, decide) — thin clients with the options, errors and exit
codes of :mod:`services.entrypoints.cli.remote`. Each answers the server's ``WriteResult``: the outcome, the
card's id, an arbitration case when the write was queued, and the write's ``position`` (pass it to
a read as ``--min-position`` to read it back at once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from services.entrypoints.cli.remote import AsJson, Key, Moment, Url, emit, remote, when

if TYPE_CHECKING:
    from palimpsest_client import Client


def _print_write(result: dict[str, Any]) -> None:
    line = f"{result['outcome']}"
    if result.get("card_id"):
        line += f": card {result['card_id']}"
    if result.get("case_id"):
        line += f", arbitration case {result['case_id']}"
    if result.get("reason"):
        line += f" ({result['reason']})"
    if result.get("position") is not None:
        line += f"; position {result['position']}"
    typer.echo(line + ("; answered from an earlier identical request" if result.get("replayed")
                       else ""))


def _write(url: str | None, key: str | None, as_json: bool,
           call: Callable[[Client], dict[str, Any]]) -> None:
    with remote(url, key, as_json) as server:
        result = call(server)
    emit(result, as_json, _print_write)


def _authored(source: str | None, confidence: float | None, agent: str | None,
              session: str | None, turn: str | None, request_id: str | None) -> dict[str, Any]:
    return {"source": source, "inference_confidence": confidence, "agent_id": agent,
            "session_id": session, "turn_id": turn, "request_id": request_id}


Source = typer.Option(None, "--source", help="user_stated (default), agent_inferred or imported.")
Confidence = typer.Option(None, "--confidence", min=0.0, max=1.0,
                          help="An agent_inferred card's inference confidence.")
Agent = typer.Option(None, "--agent", help="The writing agent's id.")
Session = typer.Option(None, "--session", help="The conversation's session id.")
Turn = typer.Option(None, "--turn", help="The turn within the session.")
RequestId = typer.Option(None, "--request-id", help="Stores the command once: a retry with the "
                         "same id answers the same.")
Tags = typer.Option([], "--tag", help="A tag (repeatable).")
Links = typer.Option([], "--link", metavar="CARD_ID", help="A card this one links to on creation: "
                     "an event affects states, knowledge is evidenced_by events (repeatable).")
CardId = typer.Argument(..., metavar="CARD_ID", help="The card's id.")


def register(cli: typer.Typer) -> None:
    """Add the write commands and ``arbitrations`` to the ``palimpsest`` command line."""

    @cli.command()
    def remember(
        content: str = typer.Argument(..., help="The value, event description or knowledge body."),
        kind: str = typer.Option("state", help="state, event or knowledge."),
        memory_type: str = typer.Option(None, "--type", help="fact, preference, decision, "
                                        "commitment, blocker, pattern, note or event (default: "
                                        "fact, event for an event, note for knowledge)."),
        subject: str = typer.Option(None, help="A state's subject, e.g. user."),
        label: str = typer.Option(None, help="A state's label, e.g. address."),
        cardinality: str = typer.Option(None, help="single_value or multi_value (default: the "
                                        "rule table's)."),
        item_key: str = typer.Option(None, help="A multi-value item's key."),
        valid_from: str = Moment("World time it holds from"),
        valid_to: str = Moment("World time it held until"),
        occurred_at: str = Moment("When the event happened"),
        title: str = typer.Option(None, help="A knowledge card's title."),
        tag: list[str] = Tags,
        owner: str = typer.Option(None, help="A commitment's owner."),
        due_at: str = Moment("A commitment's due date"),
        link: list[str] = Links,
        scope: str = typer.Option("personal", help="personal, project, group or global."),
        project: str = typer.Option(None, "--project", help="The project of a project card."),
        group: str = typer.Option(None, "--group", help="The group of a group card."),
        perspective: str = typer.Option(None, help="Whose view a shared card holds."),
        source: str = Source, confidence: float = Confidence, agent: str = Agent,
        session: str = Session, turn: str = Turn, request_id: str = RequestId,
        url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Write one card: a state of a slot (--subject, --label), an event or knowledge."""
        default_type = {"event": "event", "knowledge": "note"}.get(kind, "fact")
        _write(url, key, as_json, lambda server: server.remember(
            kind=kind, memory_type=memory_type or default_type, content=content, subject=subject,
            label=label, cardinality=cardinality, item_key=item_key, valid_from=valid_from,
            valid_to=valid_to, occurred_at=occurred_at, title=title, tags=tag or None,
            owner=owner, due_at=due_at, links=link or None, scope=scope, project_id=project,
            group_id=group, perspective=perspective,
            **_authored(source, confidence, agent, session, turn, request_id)))

    @cli.command()
    def revise(
        card_id: str = CardId,
        content: str = typer.Argument(..., help="The new value."),
        edge: str = typer.Option(None, help="The edge to the old card: supersedes (default), "
                                 "updates, extends or derives."),
        valid_from: str = Moment("World time the new value holds from"),
        valid_to: str = Moment("World time the new value held until"),
        source: str = Source, confidence: float = Confidence, agent: str = Agent,
        session: str = Session, turn: str = Turn, request_id: str = RequestId,
        url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Revise a state card with a new value, drawing a typed edge to it."""
        _write(url, key, as_json, lambda server: server.revise(
            card_id, content, edge=edge, valid_from=valid_from, valid_to=valid_to,
            **_authored(source, confidence, agent, session, turn, request_id)))

    @cli.command()
    def correct(
        card_id: str = CardId,
        description: str = typer.Argument(..., help="The event's corrected description."),
        reason: str = typer.Option(..., "--reason", help="Why (kept in the audit)."),
        source: str = Source, agent: str = Agent, session: str = Session, turn: str = Turn,
        request_id: str = RequestId, url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Correct an event card's description (audited); when it happened is not moved."""
        _write(url, key, as_json, lambda server: server.correct(
            card_id, description, reason, **_authored(source, None, agent, session, turn, request_id)))

    @cli.command()
    def verify(card_id: str = CardId, request_id: str = RequestId, url: str = Url, key: str = Key,
               as_json: bool = AsJson) -> None:
        """Confirm a card still holds: resets its aging clock."""
        _write(url, key, as_json, lambda server: server.verify(card_id, request_id=request_id))

    @cli.command()
    def link(
        card_id: str = CardId,
        edge: str = typer.Argument(..., help="related_to, contradicts, evidenced_by, affects, "
                                   "derives, extends or updates."),
        target_id: str = typer.Argument(..., metavar="TARGET_ID", help="The card it points to."),
        request_id: str = RequestId, url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Draw a typed edge from a card to another."""
        _write(url, key, as_json,
               lambda server: server.link(card_id, edge, target_id, request_id=request_id))

    @cli.command()
    def move(
        card_id: str = CardId,
        to: str = typer.Argument(..., metavar="TO", help="wait, resolve or expire (a commitment); "
                                 "archive (a blocker)."),
        note: str = typer.Option(None, help="Why (kept with the move)."),
        request_id: str = RequestId, url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Move a commitment along open → waiting → resolved | expired, or archive a blocker."""
        _write(url, key, as_json,
               lambda server: server.move(card_id, to, note=note, request_id=request_id))

    cli.add_typer(_arbitrations(), name="arbitrations")


def _print_cases(answer: dict[str, Any]) -> None:
    for c in answer["cases"]:
        where = f"{c['subject']}/{c['label']}" if c["subject"] and c["label"] else "(erased slot)"
        typer.echo(f"case {c['case_id']} on {where}, opened {when(c['opened_at'])}")
        typer.echo(f"  current:  {', '.join(v or '(erased)' for v in c['current_values'])}")
        proposed = c["proposed_value"] or "(erased)"
        typer.echo(f"  proposed: {proposed} (valid from {when(c['proposed_valid_from'])}, "
                   f"card {c['proposed_card_id']})")
        typer.echo(f"  why:      {c['reason']}")
        if c.get("decision"):
            typer.echo(f"  decided:  {c['decision']} by {c['decided_by']}, {when(c['decided_at'])}")
    if not answer["cases"]:
        typer.echo("no arbitration is pending")


def _arbitrations() -> typer.Typer:
    group = typer.Typer(no_args_is_help=True, help="The arbitration queue: the conflicting writes "
                        "a person decides (list, decide).")

    @group.command("list")
    def listing(
        decided: bool = typer.Option(False, "--decided", help="The decided cases too, each with "
                                     "its decision."),
        url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """The pending cases, oldest first: the slot, its current value and the proposed one."""
        with remote(url, key, as_json) as server:
            answer = server.arbitrations(decided=decided)
        emit(answer, as_json, _print_cases)

    @group.command()
    def decide(
        case_id: str = typer.Argument(..., metavar="CASE_ID", help="The case, as the list shows it."),
        decision: str = typer.Argument(..., metavar="DECISION", help="keep_old, accept_new or "
                                       "both_valid."),
        by: str = typer.Option(..., "--by", help="Who decided (kept in the log)."),
        note: str = typer.Option(None, help="Why (kept in the log)."),
        card: str = typer.Option(None, "--card", metavar="CARD_ID", help="accept_new: the "
                                 "proposal to take, when not the latest."),
        request_id: str = RequestId, url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Decide a pending case (a key with memory:admin); the decision is itself an event."""
        _write(url, key, as_json, lambda server: server.decide(
            case_id, decision, by, note=note, card_id=card, request_id=request_id))

    return group


