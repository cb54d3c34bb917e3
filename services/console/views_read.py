"""The console's read pages: a slot's timeline, time travel, the cards (slicing, counts, a card's
page) and a card's graph. Each reads through the operations REST uses (``history``, ``facts``,
``search``, ``list_cards``, ``count_cards``, ``get_memories``, ``arbitrations``), as the signed-in
key: its tenant only. Nothing here is a rule; the drawings are :mod:`services.console.timeline`
and :mod:`services.console.graph`.

URLs (linked from other pages): ``/console/timeline?ref=<subject/label, slot id or card id>``,
``/console/time-travel?subject=…&q=…&valid_at=…&known_at=…``, ``/console/cards?…`` (a slice),
``/console/cards/<card id>``, ``/console/graph?card=<card id>&hops=1|2``.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from domain.errors import PalimpsestError
from domain.values import CardKind, Edge, MemoryType, ScopeKind, Source
from projections.slicing_sql import GROUP_KEYS
from services.console import graph, timeline
from services.console.web import PREFIX, SignedIn, Visitor, message, page
from services.query.retrieval.results import RetrievedCard

#: Slice filters a form gives as lists (several values, or comma-separated).
LISTS = ("kinds", "memory_types", "scopes", "sources", "agent_ids", "session_ids", "subjects",
         "labels", "tags", "project_ids", "group_ids")
#: Slice filters given as one text.
SCALARS = ("subject_prefix", "related_to", "edge", "related_concept", "recorded_during",
           "occurred_during", "confidence_below", "confidence_above", "cursor")
#: Slice moments given by a datetime-local picker (the console's zone).
MOMENTS = ("valid_from", "valid_to", "recorded_after", "recorded_before")
PAGE_SIZE = 25


def card_url(card_id: UUID | str) -> str:
    return f"{PREFIX}/cards/{card_id}"


def _page(request: Request, who: Visitor, template: str, status_code: int = 200,
          **context: Any) -> Response:
    """``page`` with what every read page writes: ``when`` (a moment in the console's zone) and
    ``card_url``."""
    zone = who.services.queries.zone

    def when(moment: datetime | None, shape: str = "%Y-%m-%d %H:%M:%S") -> str:
        return "—" if moment is None else moment.astimezone(zone).strftime(shape)

    return page(request, who, template, status_code=status_code, when=when, card_url=card_url,
                zone=zone, **context)


def read_routes(router: APIRouter) -> None:
    router.add_api_route("/timeline", timeline_page, methods=["GET"], response_class=HTMLResponse)
    router.add_api_route("/time-travel", time_travel_page, methods=["GET"],
                         response_class=HTMLResponse)
    router.add_api_route("/cards", cards_page, methods=["GET"], response_class=HTMLResponse)
    router.add_api_route("/cards/{card_id}", card_page, methods=["GET"], response_class=HTMLResponse)
    router.add_api_route("/graph", graph_page, methods=["GET"], response_class=HTMLResponse)


# ---- the slot timeline -------------------------------------------------------------------------

def timeline_page(request: Request, who: SignedIn, ref: str = "", subject: str = "",
                  label: str = "") -> Response:
    ref = (f"{subject.strip()}/{label.strip()}" if subject.strip() or label.strip()
           else ref.strip())
    if not ref:
        return _page(request, who, "timeline.html", ref="", layout=None, problem=None)
    found, problem = who.attempt("history", {"ref": ref})
    if found is None:
        return _page(request, who, "timeline.html", ref=ref, layout=None, problem=problem)
    cards, slot = _slot_of(who, found.cards)
    found_cases = (who.attempt("arbitrations", {"decided": True, "slot_id": slot})[0]
                   if slot is not None else None)
    cases = found_cases.cases if found_cases is not None else []
    queries = who.services.queries
    layout = timeline.draw(cards, queries.now(), cases, queries.zone)
    return _page(request, who, "timeline.html", ref=ref, layout=layout, cards=cards, problem=None)


def _slot_of(who: Visitor, cards: list[Any]) -> tuple[list[Any], UUID | None]:
    """The cards to draw and their slot: a state card's id stands for its whole slot."""
    states = [c.card_id for c in cards if c.kind == "state"]
    if not states:
        return cards, None
    known, _ = who.attempt("get_memories", {"card_ids": states[:100]})
    slots = {c.aggregate_id for c in known.cards} if known is not None else set()
    if len(slots) != 1:
        return cards, None
    slot = slots.pop()
    if len(cards) == 1 and slot != cards[0].card_id:
        whole, _ = who.attempt("history", {"ref": str(slot)})
        cards = whole.cards if whole is not None else cards
    return cards, slot


# ---- time travel -------------------------------------------------------------------------------

def time_travel_page(request: Request, who: SignedIn, subject: str = "", q: str = "",
                     valid_at: str = "", known_at: str = "") -> Response:
    zone = who.services.queries.zone
    context: dict[str, Any] = {"subject": subject, "q": q, "valid_at": valid_at,
                               "known_at": known_at, "now": None, "then": None, "problem": None,
                               "as_of": {}}
    try:
        moments = {"valid_at": _moment(valid_at, zone), "known_at": _moment(known_at, zone)}
    except ValueError:
        context["problem"] = "valid at and known at must be dates and times (YYYY-MM-DDTHH:MM)"
        return _page(request, who, "time_travel.html", **context)
    as_of = {k: v for k, v in moments.items() if v is not None}
    context["as_of"] = {k: v.astimezone(zone) for k, v in as_of.items()}
    if subject.strip() or q.strip():
        if as_of:
            context["then"] = _answers(who, subject, q, as_of)
        if not request.headers.get("HX-Request"):  # htmx asks for the "then" column only
            context["now"] = _answers(who, subject, q, None)
    return _page(request, who, "time_travel.html", **context)


def _moment(text: str, zone: tzinfo) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=zone)


def _answers(who: Visitor, subject: str, q: str, as_of: dict[str, datetime] | None
             ) -> dict[str, Any]:
    """A subject's facts and a question's answer, now (``as_of`` None) or as of a moment."""
    answers: dict[str, Any] = {"facts": None, "facts_problem": None, "results": None,
                               "search_problem": None}
    if subject.strip():
        found, answers["facts_problem"] = who.attempt("facts", {"subject": subject.strip(),
                                                                "as_of": as_of})
        answers["facts"] = None if found is None else found.facts
    if q.strip():
        payload = {"query": q.strip(), "as_of": as_of, "top_n": 5,
                   "subjects": [subject.strip()] if subject.strip() else []}
        found, answers["search_problem"] = who.attempt("search", payload)
        results: list[RetrievedCard] | None = None if found is None else found.results
        answers["results"] = results
    return answers


# ---- the cards ---------------------------------------------------------------------------------

def cards_page(request: Request, who: SignedIn) -> Response:
    zone = who.services.queries.zone
    params = request.query_params
    try:
        payload = _slice(params, zone, who.services.settings.time_zone)
    except ValueError:
        return _page(request, who, "cards.html", form=params, found=None, counts=None,
                     problem="the times must be dates and times (YYYY-MM-DDTHH:MM)", **_choices())
    found, problem = who.attempt("list_cards", payload)
    counts, counted = who.attempt("count_cards", {**payload, "cursor": None})
    following, start = None, request.url.remove_query_params("cursor")
    if found is not None and found.next_cursor:
        url = request.url.include_query_params(cursor=found.next_cursor)
        following = f"{url.path}?{url.query}"
    bars = None if counts is None else {
        "group_by": counts.group_by, "keys": [_key(c.key) for c in counts.counts],
        "counts": [c.count for c in counts.counts]}
    return _page(request, who, "cards.html", form=params, found=found, counts=counts, bars=bars,
                 problem=problem or counted, following=following,
                 first=f"{start.path}?{start.query}", **_choices())


def _key(key: str | None) -> str:
    return "(none)" if key is None else key


def _slice(params: Any, zone: tzinfo, zone_name: str) -> dict[str, Any]:
    """A slice from the form's query parameters (blank fields filter nothing)."""
    payload: dict[str, Any] = {"limit": PAGE_SIZE, "time_zone": zone_name,
                               "group_by": params.get("group_by") or "kind",
                               "include_superseded": params.get("include_superseded") == "on"}
    for name in LISTS:
        values = [v.strip() for raw in params.getlist(name) for v in raw.split(",") if v.strip()]
        if values:
            payload[name] = values
    for name in SCALARS:
        if (params.get(name) or "").strip():
            payload[name] = params[name].strip()
    for name in MOMENTS:
        if (moment := _moment(params.get(name) or "", zone)) is not None:
            payload[name] = moment
    as_of = {name: _moment(params.get(name) or "", zone) for name in ("valid_at", "known_at")}
    if any(as_of.values()):
        payload["as_of"] = as_of
    return payload


def _choices() -> dict[str, Any]:
    return {"choices": {"kinds": [k.value for k in CardKind],
                        "memory_types": [t.value for t in MemoryType],
                        "scopes": [s.value for s in ScopeKind], "sources": [s.value for s in Source],
                        "edges": [e.value for e in Edge], "group_by": list(GROUP_KEYS)}}


def card_page(request: Request, who: SignedIn, card_id: str) -> Response:
    try:
        wanted = UUID(card_id)
    except ValueError:
        return _page(request, who, "card.html", history=None, card=None, problem=f"no card {card_id!r}",
                     status_code=404)
    found, problem = who.attempt("history", {"ref": str(wanted)})
    history = None if found is None else next(
        (c for c in found.cards if c.card_id == wanted), None)
    if history is None:
        return _page(request, who, "card.html", history=None, card=None, status_code=404,
                     problem=problem or f"no card {card_id}")
    current = getattr(who.attempt("get_memories", {"card_ids": [wanted]})[0], "cards", [])
    around = _graph(who, wanted, 1)
    queries = who.services.queries
    return _page(request, who, "card.html", history=history, card=current[0] if current else None,
                 edges=around.edges_of(wanted) if around else [], problem=None,
                 layout=timeline.draw([history], queries.now(), (), queries.zone))


# ---- the graph ---------------------------------------------------------------------------------

def graph_page(request: Request, who: SignedIn, card: str = "", hops: str = "1") -> Response:
    depth = 2 if hops.strip() == "2" else 1
    context: dict[str, Any] = {"card": card, "hops": depth, "found": None, "problem": None,
                               "elements": None}
    if card.strip():
        try:
            center = UUID(card.strip())
        except ValueError:
            context["problem"] = f"{card!r} is no card id"
            return _page(request, who, "graph.html", **context)
        try:
            found = _graph(who, center, depth, strict=True)
        except PalimpsestError as error:
            context["problem"] = message(error)
            return _page(request, who, "graph.html", **context)
        context.update(found=found, elements=found.elements(card_url) if found else None)
    return _page(request, who, "graph.html", **context)


def _graph(who: Visitor, center: UUID, hops: int, strict: bool = False) -> graph.Graph | None:
    """The card's neighbourhood; None when it cannot be read (``strict``: raise instead)."""
    try:
        nodes, links = graph.gather(who.run, center, hops)
    except PalimpsestError:
        if strict:
            raise
        return None
    return graph.neighbourhood(center, nodes, links, hops)
