"""Parked events (decision 0007) as one tenant's use cases: list them, retry them after a fix,
skip one with an audited decision.

``palimpsest failures`` does this on the database directly, for every tenant; the console does
it for the signed-in key's tenant only: another tenant's parked event is not found, as another
tenant's card is not. Listing needs ``memory:read``; retry and skip change what the read models
hold, so they need ``memory:admin``, as deciding an arbitration does. ``monitor`` is the
projector role's database (it reads every tenant's bookkeeping); without one (no PostgreSQL read
models) nothing is parked.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel

from domain.errors import InvalidCommandError
from infra.postgres import Database
from infra.settings import Settings
from projections.failures import ParkedEventNotFoundError, Retried, retry, skip
from projections.projector import Projector
from projections.replay import make_projector
from projections.status import parked
from services.command.memory import Palimpsest
from services.keys import Principal, require

READ, ADMIN = "memory:read", "memory:admin"


class ParkedEvent(BaseModel):
    """An event the cards projection could not apply, held until retried or skipped."""

    notification_id: int
    originator_id: UUID | None
    originator_version: int | None
    topic: str | None
    reason: str
    error: str | None
    status: str
    failures: int
    since: datetime
    last_failed_at: datetime | None = None


def parked_events(monitor: Database | None, settings: Settings, who: Principal) -> list[ParkedEvent]:
    """The tenant's parked events, oldest first."""
    require(who, READ)
    if monitor is None:
        return []
    found = parked(monitor, settings)
    return [ParkedEvent.model_validate(e) for e in found.events if e["tenant_id"] == who.tenant_id]


def retry_parked(app: Palimpsest, monitor: Database | None, settings: Settings, who: Principal,
                 notification_id: int) -> list[Retried]:
    """Apply the parked event's aggregate again from the log (what still fails is parked again)."""
    require(who, ADMIN)
    projector = _projector(app, monitor, settings, who, notification_id)
    try:
        return retry(projector, app, notification_id)
    finally:
        projector.close()


def skip_parked(app: Palimpsest, monitor: Database | None, settings: Settings, who: Principal,
                notification_id: int, reason: str, decided_by: str) -> Retried:
    """Skip the parked event with a decision recorded in the log (who, why); the rest of its
    aggregate is applied."""
    require(who, ADMIN)
    if not reason.strip():
        raise InvalidCommandError("a skip needs a reason")
    projector = _projector(app, monitor, settings, who, notification_id)
    try:
        return skip(projector, app, notification_id, reason, decided_by)
    finally:
        projector.close()


def _projector(app: Palimpsest, monitor: Database | None, settings: Settings, who: Principal,
               notification_id: int) -> Projector:
    """The incremental projector, once the parked event is the tenant's own."""
    if not any(e.notification_id == notification_id and e.status == "parked"
               for e in parked_events(monitor, settings, who)):
        raise ParkedEventNotFoundError(f"no parked event at notification {notification_id}")
    assert monitor is not None  # an event was found parked
    return make_projector(settings, app, projector_db=monitor)
