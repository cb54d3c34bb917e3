"""What the extraction of a turn is shown and resolved against: the tenant's slots and the turns
said before it in its session, read from the read models (:class:`ReadModelCatalogue`), and the
embedding similarities slot resolution and grounding weigh (:class:`Similarity`).

A session's turns are extracted one after another, and the turn before may have opened the slot
this one changes: before reading, the worker waits (bounded) until the read models hold what it
wrote for the tenant (:meth:`Catalogue.wait_for`).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
from psycopg import sql

from projections.predicates import CURRENT
from services.ingest.resolution import KnownSlot
from services.query.retrieval.naming import label_text

if TYPE_CHECKING:
    from infra.embedders import Embedder
    from services.query.readmodels import ReadModels


#: A slot with its current values (the newest first), as the prompt shows it.
CatalogueSlot = KnownSlot


@dataclass(frozen=True)
class PriorTurn:
    """A turn said before the one being extracted, in the same session."""

    role: str
    said_at: datetime
    text: str


class Catalogue(ABC):
    """The read side extraction needs; :class:`NoCatalogue` when there is none."""

    @abstractmethod
    def slots(self, tenant_id: str) -> list[CatalogueSlot]:
        """The tenant's personal slots with their current values."""

    @abstractmethod
    def previous_turns(self, tenant_id: str, session_id: str, said_at: datetime,
                       limit: int) -> list[PriorTurn]:
        """Up to ``limit`` turns of the session said before ``said_at``, oldest first."""

    def previous_turns_of(self, tenant_id: str, turns: Sequence[tuple[str, datetime]],
                          limit: int) -> list[list[PriorTurn]]:
        """:meth:`previous_turns` of each (session, said at) of ``turns``, in order."""
        return [self.previous_turns(tenant_id, session, said_at, limit) for session, said_at in turns]

    def wait_for(self, tenant_id: str, position: int, timeout: float) -> None:  # noqa: B027
        """Wait until the read models hold the tenant's log up to ``position`` (or time out)."""

    def close(self) -> None:  # noqa: B027
        """Release what the catalogue holds open."""


class NoCatalogue(Catalogue):
    """No read models: every slot is new, every turn read alone."""

    def slots(self, tenant_id: str) -> list[CatalogueSlot]:
        return []

    def previous_turns(self, tenant_id: str, session_id: str, said_at: datetime,
                       limit: int) -> list[PriorTurn]:
        return []


_SLOTS = """SELECT s.subject, s.label, s.cardinality,
    coalesce((SELECT array_agg(c.content ORDER BY c.valid_from DESC, c.card_id)
              FROM {s}.cards c WHERE c.aggregate_id = s.slot_id AND c.kind = 'state' AND {current}
                AND c.erased_at IS NULL),
             '{{}}') AS values
FROM {s}.slots s WHERE s.scope = 'personal' AND s.erased_at IS NULL
ORDER BY s.subject, s.label"""

_PREVIOUS = """SELECT i.role, i.said_at, c.content AS text FROM {s}.ingestions i
JOIN {s}.cards c ON c.card_id = i.event_card_id
WHERE i.session_id = %(session)s AND i.said_at < %(said_at)s AND c.erased_at IS NULL
ORDER BY i.said_at DESC, i.turn_id DESC LIMIT %(limit)s"""

#: :data:`_PREVIOUS` for several turns at once: ``n`` numbers the turn asked about.
_PREVIOUS_OF = """SELECT q.n, p.role, p.said_at, p.text
FROM unnest(%(sessions)s::text[], %(said)s::timestamptz[]) WITH ORDINALITY AS q(session, said_at, n)
CROSS JOIN LATERAL (SELECT i.role, i.said_at, i.turn_id, c.content AS text FROM {s}.ingestions i
    JOIN {s}.cards c ON c.card_id = i.event_card_id
    WHERE i.session_id = q.session AND i.said_at < q.said_at AND c.erased_at IS NULL
    ORDER BY i.said_at DESC, i.turn_id DESC LIMIT %(limit)s) p
ORDER BY q.n, p.said_at, p.turn_id"""


class ReadModelCatalogue(Catalogue):
    """The catalogue on the read models, read as the tenant."""

    def __init__(self, read: ReadModels) -> None:
        self.read = read

    def slots(self, tenant_id: str) -> list[CatalogueSlot]:
        statement = sql.SQL(_SLOTS).format(s=self.read.schema, current=sql.SQL(CURRENT))
        with self.read.tenant(tenant_id) as conn:
            rows = conn.execute(statement).fetchall()
        return [CatalogueSlot(subject=r["subject"], label=r["label"], cardinality=r["cardinality"],
                              values=tuple(r["values"])) for r in rows]

    def previous_turns(self, tenant_id: str, session_id: str, said_at: datetime,
                       limit: int) -> list[PriorTurn]:
        if limit <= 0:
            return []
        statement = sql.SQL(_PREVIOUS).format(s=self.read.schema)
        with self.read.tenant(tenant_id) as conn:
            rows = conn.execute(statement, {"session": session_id, "said_at": said_at,
                                            "limit": limit}).fetchall()
        return [PriorTurn(**row) for row in reversed(rows)]

    def previous_turns_of(self, tenant_id: str, turns: Sequence[tuple[str, datetime]],
                          limit: int) -> list[list[PriorTurn]]:
        found: list[list[PriorTurn]] = [[] for _ in turns]
        if limit <= 0 or not turns:
            return found
        statement = sql.SQL(_PREVIOUS_OF).format(s=self.read.schema)
        with self.read.tenant(tenant_id) as conn:
            rows = conn.execute(statement, {"sessions": [session for session, _ in turns],
                                            "said": [said_at for _, said_at in turns],
                                            "limit": limit}).fetchall()
        for row in rows:
            found[row["n"] - 1].append(PriorTurn(role=row["role"], said_at=row["said_at"],
                                                 text=row["text"]))
        return found

    def wait_for(self, tenant_id: str, position: int, timeout: float) -> None:
        if position > 0:  # polled often: a round waits on it before each model call
            self.read.wait_for(tenant_id, position, timeout=timeout, poll=0.005)

    def close(self) -> None:
        self.read.close()


class Similarity:
    """Cosine similarities of short texts through ``embedder``, each text embedded once (labels
    and values recur from turn to turn); thread-safe."""

    def __init__(self, embedder: Embedder, cache_size: int = 16_384) -> None:
        self.embedder = embedder
        self.cache_size = cache_size
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        self._embed(texts)
        with self._lock:
            return np.stack([self._vectors[text] for text in texts])

    def _embed(self, texts: Iterable[str]) -> None:
        """Embed the texts not cached yet, in one call."""
        with self._lock:
            missing = [text for text in dict.fromkeys(texts) if text not in self._vectors]
        if missing:
            made = np.asarray(self.embedder.embed(missing), dtype=np.float32)
            with self._lock:
                if len(self._vectors) + len(missing) > self.cache_size:
                    self._vectors.clear()
                self._vectors.update(zip(missing, made, strict=True))

    def warm(self, pairs: Iterable[tuple[str, str | None]]) -> None:
        """Embed at once what :meth:`closeness` reads for these (label, value) pairs: the
        label as words, and the attribute as stated when there is a value."""
        texts = []
        for label, value in pairs:
            texts.append(label_text(label))
            if value is not None:
                texts.append(_stated(label, value))
        self._embed(texts)

    def warm_up(self) -> None:
        """Load the embedder's model, if it has one to load."""
        load = getattr(self.embedder, "load", None)
        if callable(load):
            load()

    def to_each(self, text: str, others: Sequence[str]) -> list[float]:
        """``text``'s similarity to each of ``others``, in order."""
        if not others:
            return []
        vectors = self.vectors([text, *others])
        return [float(v) for v in vectors[1:] @ vectors[0]]

    def closeness(self, label: str, value: str, slots: Sequence[KnownSlot]) -> dict[str, float]:
        """How close a candidate sits to each slot: the mean of the labels' similarity (read as
        words: ``job_title`` → "job title") and that of the attribute as stated ("diet:
        vegetarian"); the labels' alone for a slot with no current value."""
        labels = self.to_each(label_text(label), [label_text(slot.label) for slot in slots])
        stated = self.to_each(_stated(label, value), [_stated(slot.label, slot.values[0])
                                                      for slot in slots if slot.values])
        found = iter(stated)
        return {slot.label: (by_label + next(found)) / 2 if slot.values else by_label
                for slot, by_label in zip(slots, labels, strict=True)}


def _stated(label: str, value: str) -> str:
    return f"{label_text(label)}: {' '.join(value.split())[:200]}"
