"""The operations page: the pipeline's liveness and the tenant's lag (``status``), ingested turns by
status with the dead letters and a re-run each (``ingestions``, ``rerun_ingestion``), the tenant's
parked events with retry and skip (:mod:`services.command.failures`: requests ``serve``'s own
process carries out, waited for a few seconds, then followed on this page), and the erasures
(:mod:`services.console.views_erasure`)."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from domain.errors import PalimpsestError
from services.command import failures
from services.console.views_arbitration import decided_by
from services.console.views_erasure import erasure_routes
from services.console.web import Checked, SignedIn, Visitor, message, page

#: Turns of each listing the page shows.
LISTED = 50
#: Seconds a retry or skip request is waited for before the page says it is under way.
REQUEST_WAIT = 8.0


def operations_routes(router: APIRouter) -> None:
    @router.get("/operations", response_model=None)
    def operations(request: Request, who: SignedIn, done: str | None = None,
                   at: Annotated[int | None, Query(ge=0)] = None) -> Response:
        return operations_page(request, who, done=done, at=at)

    @router.post("/operations/ingestions/{ingestion_id}/rerun", response_model=None)
    def rerun(request: Request, ingestion_id: UUID, who: Checked) -> Response:
        result, problem = who.attempt("rerun_ingestion", {"ingestion_id": ingestion_id})
        return _after(request, who, problem, f"re-run of turn {ingestion_id}: "
                      f"{result and result.outcome}", result and result.position)

    @router.post("/operations/parked/{notification_id}/retry", response_model=None)
    def retry(request: Request, notification_id: int, who: Checked) -> Response:
        try:
            asked = failures.request_retry(who.services.queries.read, who.principal,
                                           notification_id, decided_by(who), REQUEST_WAIT)
        except PalimpsestError as error:
            return _after(request, who, message(error), "")
        return _after(request, who, None, _said(asked))

    @router.post("/operations/parked/{notification_id}/skip", response_model=None)
    def skip(request: Request, notification_id: int, who: Checked,
             reason: Annotated[str, Form(max_length=2_000)] = "") -> Response:
        try:
            asked = failures.request_skip(who.services.queries.read, who.principal,
                                          notification_id, reason, decided_by(who), REQUEST_WAIT)
        except PalimpsestError as error:
            return _after(request, who, message(error), "")
        return _after(request, who, None, _said(asked))

    erasure_routes(router, operations_page)


def operations_page(request: Request, who: Visitor, *, done: str | None = None,
                    problem: str | None = None, status_code: int = 200, at: int | None = None,
                    **more: Any) -> Response:
    """The operations page, with ``done`` or ``problem`` said on top; with ``at`` (an action's
    position) once the read models hold it (waited for, bounded)."""
    status, trouble = who.attempt("status", {})
    turns, trouble_turns = who.attempt("ingestions", {"limit": LISTED, "min_position": at})
    dead, _ = who.attempt("ingestions", {"status": "dead_letter", "limit": LISTED})
    erasures, trouble_erasures = who.attempt("erasures", {"limit": LISTED})
    try:
        read = who.services.queries.read
        parked = failures.parked_events(read, who.principal)
        requests = failures.parked_requests(read, who.principal, limit=10)
        trouble_parked = None
    except PalimpsestError as error:
        parked, requests, trouble_parked = [], [], message(error)
    problems = [p for p in (problem, trouble, trouble_turns, trouble_erasures, trouble_parked) if p]
    return page(request, who, "operations.html", status_code=status_code, status=status,
                turns=turns, dead=dead.ingestions if dead else [], parked=parked, requests=requests,
                erasures=erasures.erasures if erasures else [], done=done, problems=problems,
                **more)


def _after(request: Request, who: Visitor, problem: str | None, done: str,
           position: int | None = None) -> Response:
    """After an action: the page again with the problem (422), or a redirect saying what was done
    (and the action's position, which the page waits for)."""
    if problem is not None:
        return operations_page(request, who, problem=problem, status_code=422)
    target = request.url_for("operations").include_query_params(done=done, at=position or 0)
    return RedirectResponse(str(target), status_code=303)


def _said(asked: failures.ParkedRequest) -> str:
    """What a request came to, or that it is under way (the page lists it with its status)."""
    done = "retried" if asked.action == "retry" else "skipped"
    if asked.status == "requested":
        return f"{asked.action} of #{asked.notification_id} requested: the server carries it out shortly"
    if asked.status == "done":
        return f"{done} #{asked.notification_id}: {asked.outcome}"
    return f"{asked.action} of #{asked.notification_id} {asked.status}: {asked.outcome}"
