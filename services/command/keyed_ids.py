"""Ids derived from personal text, keyed under the tenant's data key (DESIGN §7, decision 0012).

A slot is known by its ``(tenant, scope, subject, label)``. Its id used to be an unkeyed UUIDv5
of those parts, in clear in every event, in the erasure event, in the key table and in the read
models: a reader of a dump who guessed ``alice / clinic`` found the match. It is now an HMAC under
a secret derived (HKDF) from the tenant's data key — the ``tenant`` unit of the key ring, the key
a tenant's erasure destroys — so only the key holder can compute it, and a tenant's erasure takes
the means of computing it too. The embedding cache's keys are made the same way
(``infra.embedders.CacheKeys``), with a derivation of their own.

Slots written before keep their legacy ids (the log is append-only): in a tenant that has any
(its key table holds a slot key of a version-5 id; keyed ids are version 8), each generation of
a slot is looked for under its keyed id, then under its legacy id (:func:`slot_generations`), so
a store written then keeps working — reads, writes to its slots, and erasure — and every slot it
opens from now on is keyed. A tenant without one pays no second lookup. A process learns that a
tenant has legacy slots once; that it has none, again after :data:`RECHECK_SECONDS` (an older
process still running beside it during an upgrade may open some meanwhile).

A store without a key ring seals nothing (its events hold subject and label in clear) and keeps
the unkeyed ids.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from itertools import count
from uuid import UUID

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from domain.base import keyed_id
from domain.slot import Slot
from domain.values import Scope
from infra.keyring import KeyRing, Unit, tenant_unit

#: What the key of a tenant's ids is derived for (HKDF's ``info``).
KEYED_IDS_INFO = b"palimpsest keyed ids"
#: How many tenants' derived keys a process keeps (one entry each; a full cache starts over).
_CACHED_TENANTS = 4096

#: tenant -> (the id of the tenant data key it was derived from, the derived key).
_derived: dict[str, tuple[UUID, bytes]] = {}
_lock = threading.Lock()
#: How long a process trusts that a tenant has no slot under a legacy id.
RECHECK_SECONDS = 300.0
#: tenant -> (whether it has slots under legacy ids, when that was learnt).
_legacy: dict[str, tuple[bool, float]] = {}


def ids_key(ring: KeyRing | None, tenant_id: str) -> bytes | None:
    """The secret the tenant's keyed ids are computed under, or None without a ring.

    The ring is asked for the tenant's live data key on every call (its own cache answers on the
    hot path), and the derivation is kept per tenant as long as that key is the same: a key an
    erasure destroyed is never derived from again here."""
    if ring is None:
        return None
    key_id, data_key = ring.data_key(tenant_id, Unit("tenant", tenant_unit(tenant_id)))
    cached = _derived.get(tenant_id)
    if cached is not None and cached[0] == key_id:
        return cached[1]
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=KEYED_IDS_INFO).derive(data_key)
    with _lock:
        if len(_derived) >= _CACHED_TENANTS:
            _derived.clear()
        _derived[tenant_id] = (key_id, derived)
    return derived


def has_legacy_slots(ring: KeyRing, tenant_id: str) -> bool:
    """Whether the tenant has slots opened under their legacy unkeyed ids (version-5 UUIDs)."""
    known = _legacy.get(tenant_id)
    if known is not None and (known[0] or time.monotonic() - known[1] < RECHECK_SECONDS):
        return known[0]
    legacy = ring.made_version(tenant_id, "slot", 5)
    with _lock:
        if len(_legacy) >= _CACHED_TENANTS:
            _legacy.clear()
        _legacy[tenant_id] = (legacy, time.monotonic())
    return legacy


def forget_checks() -> None:
    """Forget what this process learnt of tenants' legacy slots (as a process started now)."""
    with _lock:
        _legacy.clear()


def slot_generations(ring: KeyRing | None, tenant_id: str, scope: Scope, subject: str,
                     label: str) -> Iterator[tuple[UUID, ...]]:
    """Per generation of a slot, oldest first and without end, the ids it may be stored under:
    its keyed id (the one a new slot gets), then its legacy unkeyed id when the tenant has slots
    opened before ids were keyed."""
    key = ids_key(ring, tenant_id)
    legacy = ring is not None and has_legacy_slots(ring, tenant_id)
    for generation in count():
        keyed = Slot.create_id(key, tenant_id, scope, subject, label, generation)
        if not legacy:
            yield (keyed,)
        else:
            yield keyed, Slot.legacy_id(tenant_id, scope, subject, label, generation)


def session_target(ring: KeyRing | None, tenant_id: str, session_id: str) -> str:
    """An ingested session as an erasure event names it: a keyed hash of the caller's session id
    (which may say whose conversation it was), never the id itself."""
    key = ids_key(ring, tenant_id)
    return session_id if key is None else str(keyed_id(key, "session", tenant_id, session_id))
