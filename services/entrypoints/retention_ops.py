"""Retention of raw conversation turns, as the edges offer it (DESIGN §7): a tenant's policy,
read and set.

``set_retention`` records the policy :class:`services.command.retention.RetentionWorker` applies inside
``palimpsest serve``: the turns ingest stored that were said more than ``turn_days`` days ago are
erased, one erasure each with basis ``retention``, and with ``extracted`` the cards extraction made
of them too. Setting it needs ``memory:erase``, as forgetting a whole tenant does: it erases every
old turn of the tenant, on a schedule, with no one naming them — a tenant-wide erasure spread over
time. Who set it is the key (``key <key id>``), never the body. ``retention`` answers the policy
(every turn kept when none was set) with ``memory:read``. Neither is an MCP tool: an agent's key
has no business setting how long its user's words are kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from domain.retention import MAX_TURN_DAYS
from services.command.retention import SetRetention
from services.entrypoints import schemas as s
from services.entrypoints.operation import Operation
from services.keys import Principal

if TYPE_CHECKING:
    from services.bootstrap import Services

READ, ERASE = "memory:read", "memory:erase"


class RetentionInput(s.Request):
    pass


class SetRetentionInput(s.Request):
    """The whole policy: a PUT names both fields' values (``turn_days: null`` keeps every turn)."""

    turn_days: int | None = Field(ge=1, le=MAX_TURN_DAYS, description="Keep raw conversation "
                                  "turns this many days after they were said; null: keep every turn")
    extracted: bool = Field(default=False, description="Erase the cards extraction made of an "
                            "expired turn with it (default: they are kept)")
    request_id: str | None = Field(default=None, min_length=1, max_length=200)


class RetentionPolicy(BaseModel):
    turn_days: int | None
    extracted: bool


class RetentionSet(RetentionPolicy):
    #: The notification id of the policy's event; None when a retried request was answered from
    #: its receipt.
    position: int | None = None
    replayed: bool = False


def retention(services: Services, who: Principal, data: RetentionInput) -> RetentionPolicy:
    policy = services.app.retention(who.tenant_id)
    return RetentionPolicy(turn_days=policy.turn_days, extracted=policy.extracted)


def set_retention(services: Services, who: Principal, data: SetRetentionInput) -> RetentionSet:
    command = SetRetention(**data.model_dump(exclude={"tenant_id"}), set_by=f"key {who.key_id}")
    result = services.app.set_retention(who.tenant_id, command)
    return RetentionSet(turn_days=command.turn_days, extracted=command.extracted,
                        position=result.position, replayed=result.replayed)


RETENTION_OPERATIONS: tuple[Operation[Any, Any], ...] = (
    Operation("retention", "The tenant's retention policy for raw conversation turns: how many "
              "days a turn is kept (null: every turn is kept) and whether the cards made of it "
              "go with it.", RetentionInput, RetentionPolicy, READ, retention, read_only=True,
              idempotent=True),
    Operation("set_retention", "Set the retention policy (memory:erase): serve erases the turns "
              "said more than turn_days days ago, one erasure each (basis retention), and with "
              "extracted the cards made of them.", SetRetentionInput, RetentionSet, ERASE,
              set_retention, destructive=True, idempotent=True),
)
