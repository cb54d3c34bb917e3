"""Slot-aware answers (DESIGN §3): the slot stage of the read path. It reads the tenant's slots
(cached briefly), asks ``naming`` which of them the question names, and reads the named slots'
valid cards at the asked moment: those that lead the answer — every valid item of a multi-value
slot, one card (two when they contradict) of a single-value one — and those that only weigh in,
fused like a route. A question that names blockers or commitments leads with the open ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from domain.errors import InvalidCommandError
from projections.cards import NAME
from projections.text import query_terms
from services.query.retrieval.lexicon import BY_WORD, EXAMPLES, types_named
from services.query.retrieval.naming import (
    SlotEntry,
    Slots,
    example_concepts,
    label_question,
    label_text,
    name_slots,
)
from services.query.retrieval.query import Hits, RetrievalQuery, RouteContext, parameters, scope_of
from services.query.retrieval.scoring import LeadKey, Ranking, type_key

_CATALOGUE = """SELECT slot_id, scope, project_id, group_id, subject, label, cardinality
FROM {s}.slots s WHERE s.erased_at IS NULL AND s.subject IS NOT NULL AND s.label IS NOT NULL
  AND {scope}"""

#: The valid cards of the named slots, the newest first: up to ``items`` of each slot that leads
#: (every item of a multi-value slot, as far as an answer shows them), ``few`` of each that only
#: weighs in; and the open cards of a named memory type.
_VALID = """SELECT x.card_id, x.aggregate_id FROM unnest(%(led)s::uuid[]) AS s(slot_id)
CROSS JOIN LATERAL (SELECT c.card_id, c.aggregate_id FROM {s}.cards c
    WHERE c.aggregate_id = s.slot_id AND c.kind = 'state' AND {visible}
    ORDER BY c.valid_from DESC, c.card_id LIMIT %(items)s) AS x
UNION ALL SELECT x.card_id, x.aggregate_id FROM unnest(%(weighed)s::uuid[]) AS s(slot_id)
CROSS JOIN LATERAL (SELECT c.card_id, c.aggregate_id FROM {s}.cards c
    WHERE c.aggregate_id = s.slot_id AND c.kind = 'state' AND {visible}
    ORDER BY c.valid_from DESC, c.card_id LIMIT %(few)s) AS x
UNION ALL (SELECT c.card_id, c.aggregate_id FROM {s}.cards c
    WHERE c.kind = 'state' AND c.label IS NULL AND c.memory_type = ANY(%(types)s::text[])
      AND c.status IN ('open', 'waiting', 'active') AND {visible}
    ORDER BY c.valid_from DESC, c.card_id LIMIT %(items)s)"""

#: Cards of a slot that only weighs in: its latest values, enough to lift the one the routes found.
WEIGHED_ITEMS = 3


#: The tenant's projected position (the route's connection sees the tenant's rows only).
_POSITION = ("SELECT coalesce(max(position), 0) AS position FROM {s}.projection_position "
             "WHERE projection = %(projection)s")


class SlotFinder:
    """The slot stage of the read path: one per retriever. It keeps each tenant's slots for
    ``ttl`` seconds (a slot opened since is named once the catalogue is read again) — unless
    the question is asked fresh from a position the kept catalogue was read before (a caller's
    own write, ``min_position``: written through another process, it is in no overlay here) —
    and each label's embedding for as long as the process runs."""

    name = "slots"

    def __init__(self, vector: Callable[[str], np.ndarray] | None = None,
                 embed: Callable[[list[str]], list[list[float]]] | None = None,
                 ttl: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.vector = vector
        self.embed = embed
        self.ttl = ttl
        self.clock = clock
        self._catalogues: dict[tuple[str, Any], tuple[float, int, Slots]] = {}
        self._labels: dict[str, np.ndarray] = {}
        self._examples: tuple[list[str], np.ndarray] | None = None
        self._lock = threading.Lock()

    def settings(self, ctx: RouteContext) -> Mapping[str, str]:
        return {}

    def idle(self, query: RetrievalQuery, **extra: Any) -> str | None:
        return None if query_terms(query.words) else "no words in the query"

    def __call__(self, conn: psycopg.Connection[Any], query: RetrievalQuery, ctx: RouteContext,
                 tenant_id: str = "", **extra: Any) -> Hits:
        slots = self.catalogue(conn, ctx, query, tenant_id)
        similarities = self.similarities(query.text, slots.labels)
        questions = partial(self.similarities, query.text, slots.labels, form=label_question)
        examples = example_concepts(self.examples(query.text), ctx.settings) if ctx.settings.lexicon else {}
        names_time = _names_time(query)
        naming = name_slots(query.words, slots, ctx.settings, similarities=similarities,
                            examples=examples, names_time=names_time, questions=questions)
        strengths = {e.slot_id: 1.0 for e in naming.leads} | {e.slot_id: s for e, s in naming.weighed}
        types = types_named(query_terms(query.words))
        if not strengths and not types:
            return Hits([], naming.note())
        led = {e.slot_id for e in naming.leads}
        rows = conn.execute(sql.SQL(_VALID).format(s=ctx.s, visible=ctx.visible(query)), {
            **parameters(query), "led": list(led), "weighed": [i for i in strengths if i not in led],
            "types": types, "items": ctx.settings.slot_items, "few": WEIGHED_ITEMS}).fetchall()
        weight = [strengths.get(row["aggregate_id"], 1.0) for row in rows]
        order = sorted(range(len(rows)), key=lambda i: -weight[i])
        named: list[tuple[float, LeadKey]] = [(naming.strengths[e.label], e.key) for e in naming.leads]
        if not names_time:  # a memory type is named by a word of the lexicon
            named += [(BY_WORD, type_key(memory_type)) for memory_type in types]
        leads = [key for _, key in sorted(named, key=lambda item: -item[0])]
        note = naming.note() + (f"; memory types: {', '.join(types)}" if types else "")
        return SlotHits([rows[i]["card_id"] for i in order], note, [weight[i] for i in order],
                        leads=tuple(leads))

    def subjects(self, conn: psycopg.Connection[Any], ctx: RouteContext, query: RetrievalQuery,
                 tenant_id: str) -> set[str]:
        """The subjects of the tenant's slots in the query's scope (for the tags route)."""
        return self.catalogue(conn, ctx, query, tenant_id).subjects

    def catalogue(self, conn: psycopg.Connection[Any], ctx: RouteContext, query: RetrievalQuery,
                  tenant_id: str) -> Slots:
        """The tenant's slots in the query's scope, read at most once per ``ttl`` (and again for a
        question asked fresh from a position the kept ones were read before)."""
        key = (tenant_id, (query.project_id, query.group_ids, query.include_global))
        now = self.clock()
        with self._lock:
            cached = self._catalogues.get(key)
        if cached is not None and now - cached[0] < self.ttl and (
                query.fresh_from is None or cached[1] >= query.fresh_from):
            return cached[2]
        row = conn.execute(sql.SQL(_POSITION).format(s=ctx.s), {"projection": NAME}).fetchone()
        position = int(row["position"]) if row else 0  # read first: the slots hold at least it
        statement = sql.SQL(_CATALOGUE).format(s=ctx.s, scope=scope_of("s"))
        slots = Slots([SlotEntry(**row) for row in conn.execute(statement, parameters(query))])
        with self._lock:
            if len(self._catalogues) > 4_096:
                self._catalogues.clear()
            self._catalogues[key] = (now, position, slots)
        return slots

    def similarities(self, text: str, labels: Sequence[str],
                     form: Callable[[str], str] = label_text) -> dict[str, float] | None:
        """Each label's embedding similarity to ``text`` — of the label's words, or of what
        ``form`` makes of it —; None without an embedder."""
        if self.vector is None or self.embed is None or not labels:
            return None
        missing = sorted({form(label) for label in labels} - self._labels.keys())
        if missing:
            vectors = np.asarray(self.embed(missing), dtype=np.float32)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
            with self._lock:
                if len(self._labels) > 65_536:
                    self._labels.clear()
                self._labels.update(zip(missing, vectors, strict=True))
        asked = self.vector(text)
        return {label: float(self._labels[form(label)] @ asked) for label in labels}

    def examples(self, text: str) -> dict[str, float]:
        """Each concept's closest example question's similarity to ``text`` (none without an
        embedder); the examples are embedded once."""
        if self.vector is None or self.embed is None:
            return {}
        if self._examples is None:
            names = [name for name, questions in EXAMPLES.items() for _ in questions]
            vectors = np.asarray(self.embed([q for questions in EXAMPLES.values() for q in questions]),
                                 dtype=np.float32)
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
            self._examples = (names, vectors)
        names, vectors = self._examples
        found: dict[str, float] = {}
        for name, similarity in zip(names, (vectors @ self.vector(text)).tolist(), strict=True):
            found[name] = max(found.get(name, -1.0), similarity)
        return found


@dataclass(frozen=True)
class SlotHits(Hits):
    """The slot stage's answer: the named slots' valid cards as a ranking, and what leads."""

    leads: tuple[LeadKey, ...] = ()

    def ranking(self) -> Ranking:
        """The named slots' cards weighed alike are alike: they share a rank in the fusion."""
        return Ranking(self.ids, self.strengths, shared=True)


def _names_time(query: RetrievalQuery) -> bool:
    try:
        return bool(query.time_ranges)
    except InvalidCommandError:  # an ambiguous time word still names a time
        return True
