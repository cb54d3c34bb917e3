"""How the read-your-writes overlay learns of erasures another process made (DESIGN §7).

Each HTTP worker keeps its own overlay (:class:`services.query.pending.PendingWrites`): the cards
it wrote that the read models may not hold yet. An erasure through another worker drops nothing
from it, and until the projector applies the write and the erasure, a search landing here would
still show the erased text — with a stalled projector, for as long as it is stalled. So before a
search uses a non-empty overlay, it asks:

- :meth:`ErasedCards.count` — how many times keys were destroyed (the sequence every destruction
  moves on once its keys are gone, :data:`infra.keyring.DESTROYED_SEQUENCE`): one cheap read, only
  while the overlay holds entries;
- :meth:`ErasedCards.erased` — when the count moved since an entry was last checked (or the entry
  was never checked), whether its card's key is still live. Every erasure that covers a card — of
  the card, its slot, its subject, its session, its turn, the tenant — destroys the card's own key
  (``infra.sealing``: a card's text is sealed under it), and the key table answers that directly,
  past any key the ring caches.

A store bootstrapped before the sequence existed has no count: every entry is then checked on
every search that would use it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from uuid import UUID

from psycopg import sql

from infra.keyring import DESTROYED_SEQUENCE, KeyRing, destroyed_count
from infra.tenancy import acting_for
from services.query.readmodels import ReadModels


class ErasedCards:
    """The count of key destructions, and which cards' keys are gone, for the overlay's checks.
    ``event_schema``: the schema of the log and its key ring."""

    def __init__(self, ring: KeyRing, read: ReadModels, event_schema: str) -> None:
        self._ring = ring
        self._read = read
        self._schema = event_schema
        self._statement: sql.Composed | None = None

    def count(self, tenant_id: str) -> int | None:
        """How many times keys were destroyed, by any process (None: the store keeps no count)."""
        with self._read.tenant(tenant_id) as conn:
            if self._statement is None:
                self._statement = self._prepare(conn)
            row = conn.execute(self._statement).fetchone()
        value = row["destroyed"] if row is not None else None
        return None if value is None else int(value)

    def erased(self, tenant_id: str, card_ids: Collection[UUID]) -> set[UUID]:
        """Those of ``card_ids`` whose card key is no longer live: erased."""
        if not card_ids:
            return set()
        with acting_for(tenant_id):  # the tenant's rows of the key table (row-level security)
            found = self._ring.find(tenant_id, cards=card_ids)
        live = {key.unit_id for key in found if key.kind == "card"}
        return set(card_ids) - live

    def _prepare(self, conn: Any) -> sql.Composed:
        """The statement that reads the count, or NULL where the store lacks the sequence."""
        name = sql.Identifier(self._schema, DESTROYED_SEQUENCE).as_string(conn)
        found = conn.execute("SELECT to_regclass(%s) AS found", (name,)).fetchone()
        count: sql.Composable = destroyed_count(self._schema) if found["found"] is not None \
            else sql.SQL("NULL::bigint")
        return sql.SQL("SELECT {} AS destroyed").format(count)
