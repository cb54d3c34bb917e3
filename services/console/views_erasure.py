"""Requesting an erasure from the operations page, in two steps: the form names a unit (a card, a
slot, a subject, an ingested session); the confirmation says what it holds — read with the same
operations REST offers — and only the confirmed form runs ``forget``, with REST's scopes: a card or
a slot needs ``memory:write``, a subject or a session ``memory:erase``; a refusal answers 403 with
the stable code, and nothing is forgotten."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from uuid import UUID, uuid4

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field, ValidationError

from domain.errors import PalimpsestError, PermissionDeniedError
from services.console.web import Checked, Visitor, message, page

UNITS = ("card", "slot", "subject", "session")
#: The values the confirmation quotes, at most.
QUOTED = 10


class Asked(BaseModel):
    """An erasure as the form asks for it (empty fields are none)."""

    unit: str = Field(pattern="^(card|slot|subject|session)$")
    card_id: UUID | None = None
    slot_id: UUID | None = None
    subject: str | None = Field(default=None, max_length=200)
    label: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, max_length=200)
    basis: str = Field(default="request", min_length=1, max_length=100)
    reason: str = Field(default="", max_length=2_000)

    def forget(self, request_id: str) -> dict[str, Any]:
        """The ``forget`` operation's input: only the fields of this unit."""
        fields = {"card": ("card_id",), "slot": ("slot_id", "subject", "label"),
                  "subject": ("subject",), "session": ("session_id",)}[self.unit]
        named = {f: getattr(self, f) for f in fields if getattr(self, f) is not None}
        if self.unit == "slot" and self.slot_id is not None:
            named = {"slot_id": self.slot_id}
        return {"unit": self.unit, **named, "basis": self.basis, "reason": self.reason,
                "request_id": request_id}


Form_ = Annotated[str, Form(max_length=2_000)]
Render = Callable[..., Response]


def erasure_routes(router: APIRouter, operations_page: Render) -> None:
    @router.post("/operations/erasures/confirm", response_model=None)
    def confirm(request: Request, who: Checked, unit: Form_ = "", card_id: Form_ = "",
                slot_id: Form_ = "", subject: Form_ = "", label: Form_ = "", session_id: Form_ = "",
                basis: Form_ = "request", reason: Form_ = "") -> Response:
        try:
            asked = _asked(unit, card_id, slot_id, subject, label, session_id, basis, reason)
        except ValidationError as error:
            return operations_page(request, who, problem=message(error), status_code=422)
        named, quoted, count = _what(who, asked)
        return page(request, who, "erasure_confirm.html", asked=asked, named=named, quoted=quoted,
                    count=count, request_id=str(uuid4()))

    @router.post("/operations/erasures", response_model=None)
    def forget(request: Request, who: Checked, unit: Form_ = "", card_id: Form_ = "",
               slot_id: Form_ = "", subject: Form_ = "", label: Form_ = "", session_id: Form_ = "",
               basis: Form_ = "request", reason: Form_ = "", confirmed: Form_ = "",
               request_id: Form_ = "") -> Response:
        try:
            asked = _asked(unit, card_id, slot_id, subject, label, session_id, basis, reason)
        except ValidationError as error:
            return operations_page(request, who, problem=message(error), status_code=422)
        if confirmed != "yes":
            return operations_page(request, who, status_code=422, problem="an erasure runs only "
                                   "once confirmed: nothing was forgotten")
        try:
            result = who.run("forget", asked.forget(request_id or str(uuid4())))
        except (PalimpsestError, ValidationError) as error:
            status = 403 if isinstance(error, PermissionDeniedError) else 422
            return operations_page(request, who, problem=message(error), status_code=status)
        done = f"forgot the {asked.unit}: {len(result.card_ids)} card(s), {result.keys_destroyed} key(s)"
        target = request.url_for("operations").include_query_params(done=done, at=result.position or 0)
        return RedirectResponse(str(target), status_code=303)


def _asked(unit: str, card_id: str, slot_id: str, subject: str, label: str, session_id: str,
           basis: str, reason: str) -> Asked:
    fields = {"unit": unit, "card_id": card_id, "slot_id": slot_id, "subject": subject,
              "label": label, "session_id": session_id, "basis": basis or "request",
              "reason": reason}
    return Asked.model_validate({k: v.strip() for k, v in fields.items() if v.strip()
                                    or k == "reason"})


def _what(who: Visitor, asked: Asked) -> tuple[str, list[str | None], int | None]:
    """What the erasure would forget: its name, some of its values, how many cards (None: not
    known)."""
    if asked.unit == "card" and asked.card_id is not None:
        card, _ = who.attempt("get_card", {"card_id": asked.card_id})
        if card is None:
            return f"card {asked.card_id} (not found: nothing to forget)", [], 0
        where = f" ({card.subject} / {card.label})" if card.subject and card.label else ""
        return f"card {card.card_id}{where}", [card.value], 1
    if asked.unit == "slot":
        ref = str(asked.slot_id) if asked.slot_id else f"{asked.subject}/{asked.label}"
        found, _ = who.attempt("history", {"ref": ref})
        cards = found.cards if found else []
        name = f"{cards[0].subject} / {cards[0].label}" if cards else ref
        return (f"the slot {name}: every version of its cards", _values(cards), len(cards))
    named = {"subject": ("subjects", asked.subject), "session": ("session_ids", asked.session_id)}
    axis, value = named[asked.unit]
    if not value:
        return f"the {asked.unit} (none named)", [], 0
    listed, _ = who.attempt("list_cards", {axis: [value], "include_superseded": True,
                                           "limit": QUOTED})
    counted, _ = who.attempt("count_cards", {axis: [value], "include_superseded": True})
    quoted = [c.content for c in listed.cards] if listed else []
    return (f"the {asked.unit} {value!r}: every card of it", quoted,
            counted.total if counted else None)


def _values(cards: list[Any]) -> list[str | None]:
    return [c.versions[-1].value for c in cards if c.versions][:QUOTED]
