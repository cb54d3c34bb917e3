"""The arbitration page: each pending case with its competing values side by side, and the three
decisions (``keep_old``, ``accept_new``, ``both_valid``) through the ``arbitrate`` operation.

What a case shows is read with the operations REST offers: ``arbitrations`` (the cases, with
who proposed the new value: it is no card until accepted), ``list_cards`` (the slot's current
cards with their provenance: agent, session, confidence) and ``history`` (the slot's recent
changes on both timelines).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from services.console.web import Checked, SignedIn, Visitor, page

DECISIONS = {"keep_old": "Keep old", "accept_new": "Accept new", "both_valid": "Both valid"}
#: The slot's changes a case shows, newest first.
RECENT = 8


@dataclass
class Case:
    """A pending case as the page draws it."""

    case: Any
    #: The slot's current cards (``list_cards`` rows), whose values the proposal competes with.
    current: list[Any] = field(default_factory=list)
    #: The slot's versions, newest recorded first: (card, version).
    changes: list[tuple[Any, Any]] = field(default_factory=list)
    problem: str | None = None


def arbitration_routes(router: APIRouter) -> None:
    @router.get("/arbitration", response_model=None)
    def arbitration(request: Request, who: SignedIn, decided: str | None = None) -> Response:
        return _listing(request, who, decided=decided)

    @router.post("/arbitration/{case_id}/decision", response_model=None)
    def decide(request: Request, case_id: UUID, who: Checked,
               decision: Annotated[str, Form(max_length=20)] = "",
               note: Annotated[str, Form(max_length=2_000)] = "") -> Response:
        before = next((c for c in _pending(who) if c.case_id == case_id), None)
        result, problem = who.attempt("arbitrate", {
            "case_id": case_id, "decision": decision, "decided_by": decided_by(who),
            "note": note.strip()})
        htmx = bool(request.headers.get("HX-Request"))
        if problem is not None and not htmx:
            return _listing(request, who, problem=problem, status_code=422)
        if problem is not None:  # the case again, saying why (htmx swaps 200s only)
            shown = _case(who, before) if before else None
            if shown is not None:
                shown.problem = problem
            return page(request, who, "arbitration_case.html", item=shown, problem=problem,
                        case_id=case_id, decisions=DECISIONS)
        if not htmx:
            return RedirectResponse(f"{request.url_for('arbitration')}?decided={decision}",
                                    status_code=303)
        return page(request, who, "arbitration_decided.html", decision=decision,
                    label=DECISIONS.get(decision, decision), result=result, case=before,
                    case_id=case_id,
                    now=_slot_now(who, before.slot_id if before else None, result.position))


def _listing(request: Request, who: Visitor, *, decided: str | None = None,
             problem: str | None = None, status_code: int = 200) -> Response:
    found, trouble = who.attempt("arbitrations", {})
    cases = [_case(who, c) for c in found.cases] if found else []
    return page(request, who, "arbitration.html", status_code=status_code, cases=cases,
                problem=problem or trouble, decided=decided, decisions=DECISIONS)


def decided_by(who: Visitor) -> str:
    """Who decides, as the decision records it: the key's name and id."""
    key = who.principal.key_id
    return key if who.name == key else f"{who.name} ({key})"[:200]


def _pending(who: Visitor) -> list[Any]:
    found, _ = who.attempt("arbitrations", {})
    return list(found.cases) if found else []


def _case(who: Visitor, case: Any) -> Case:
    shown = Case(case)
    if case.subject is not None and case.label is not None:
        cards, problem = who.attempt("list_cards", {
            "subjects": [case.subject], "labels": [case.label], "include_superseded": True,
            "limit": 50})
        shown.problem = problem
        if cards is not None:
            own = [c for c in cards.cards if c.aggregate_id == case.slot_id]
            shown.current = [c for c in own if not c.superseded and c.valid_to is None
                             and c.retracted_at is None] or [c for c in own if not c.superseded]
    history, problem = who.attempt("history", {"ref": str(case.slot_id)})
    shown.problem = shown.problem or problem
    if history is not None:
        versions = [(card, v) for card in history.cards for v in card.versions]
        versions.sort(key=lambda pair: pair[1].known_from, reverse=True)
        shown.changes = versions[:RECENT]
    return shown


def _slot_now(who: Visitor, slot_id: UUID | None, position: int | None) -> list[Any]:
    """The slot's current values once the read models hold the decision (waited for, bounded)."""
    if slot_id is None:
        return []
    found, _ = who.attempt("history", {"ref": str(slot_id), "min_position": position})
    if found is None:
        return []
    return [(card, v) for card in found.cards for v in card.versions
            if v.known_to is None and v.valid_to is None and not v.retracted]
