"""The proposals page: what consolidation proposed (rationale, score, the two cards and their
values) and the review — accept (the ordinary merge, link or revision runs) or reject, with a
note — through the ``proposals``, ``get_memories`` and ``review_proposals`` operations."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from services.console.views_arbitration import decided_by
from services.console.web import Checked, SignedIn, Visitor, page

#: Reviewed proposals the page lists under the pending ones.
REVIEWED = 10


def proposals_routes(router: APIRouter) -> None:
    @router.get("/proposals", response_model=None)
    def proposals(request: Request, who: SignedIn, reviewed: str | None = None) -> Response:
        pending, problem = who.attempt("proposals", {"review": "pending"})
        done, _ = who.attempt("proposals", {"review": None, "limit": 50})
        past = [p for p in done.proposals if p.review][:REVIEWED] if done else []
        items = pending.proposals if pending else []
        return page(request, who, "proposals.html", items=items, cards=_cards(who, items),
                    past=past, problem=problem, reviewed=reviewed)

    @router.post("/proposals/{proposal_id}/review", response_model=None)
    def review(request: Request, proposal_id: UUID, who: Checked,
               decision: Annotated[str, Form(max_length=20)] = "",
               note: Annotated[str, Form(max_length=2_000)] = "") -> Response:
        found, problem = who.attempt("review_proposals", {
            "reviews": [{"proposal_id": proposal_id, "decision": decision, "note": note.strip()}],
            "reviewed_by": decided_by(who)})
        if request.headers.get("HX-Request"):
            return page(request, who, "proposal_reviewed.html", proposal_id=proposal_id,
                        result=found.results[0] if found else None, problem=problem)
        if problem is not None:
            return page(request, who, "refused.html", status_code=422, problem=problem)
        return RedirectResponse(f"{request.url_for('proposals')}?reviewed={found.results[0].review}",
                                status_code=303)


def _cards(who: Visitor, items: list[Any]) -> dict[UUID, Any]:
    """The cards the proposals pair, by id (the read models as they are now)."""
    ids = list(dict.fromkeys(i for p in items for i in (p.src_id, p.dst_id)))[:100]
    if not ids:
        return {}
    found, _ = who.attempt("get_memories", {"card_ids": ids})
    return {card.card_id: card for card in found.cards} if found else {}
