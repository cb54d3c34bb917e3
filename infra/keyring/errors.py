"""The key ring's errors, and a refusal of the key table read as one.

    PalimpsestError
    ├── MissingKeyError         no key of that id in that tenant (another tenant's key id included)
    ├── MasterKeyError          the master key is missing, malformed, or does not open the keys
    └── NotFoundError
        └── CardNotFoundError
            └── UnitErasedError an erasure destroyed the unit's keys: nothing is written under it
"""

from __future__ import annotations

import json
from uuid import UUID

import psycopg

from domain.errors import CardNotFoundError, PalimpsestError


class MissingKeyError(PalimpsestError):
    """No key of that id in that tenant: never made there (another tenant's key id included)."""

    def __init__(self, tenant_id: str, key_id: UUID) -> None:
        super().__init__(f"no erasure key {key_id} in tenant {tenant_id!r}")
        self.tenant_id = tenant_id
        self.key_id = key_id


class MasterKeyError(PalimpsestError):
    """The master key is missing, malformed, or not the one the store's keys were sealed by."""


class UnitErasedError(CardNotFoundError):
    """An erasure destroyed the keys of the unit: no key is made for it again, so nothing is
    written under it (a write decided before the erasure is refused whole, stores nothing)."""

    def __init__(self, tenant_id: str, kind: str, unit_id: UUID) -> None:
        super().__init__(f"{kind} {unit_id} was erased: nothing is written under it again")
        self.tenant_id = tenant_id
        self.kind = kind
        self.unit_id = unit_id

    @property
    def unit(self) -> tuple[str, str, UUID]:
        return self.tenant_id, self.kind, self.unit_id


#: The SQLSTATE the key table raises when a key of an erased unit is inserted, or an event is
#: stored under a destroyed key (:data:`_DDL`).
ERASED_SQLSTATE = "PE001"


def erased_refusal(error: BaseException) -> UnitErasedError | None:
    """The :class:`UnitErasedError` a database error (or the error it was raised from) is: the
    key table's refusal of a write under an erased unit; None for any other error."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, UnitErasedError):
            return seen
        if isinstance(seen, psycopg.Error) and seen.sqlstate == ERASED_SQLSTATE:
            tenant_id, kind, unit_id = json.loads(seen.diag.message_detail or "[]")
            return UnitErasedError(tenant_id, kind, UUID(unit_id))
        seen = seen.__cause__
    return None
