"""Retention of raw conversation turns (DESIGN §7): a policy per tenant, applied on a schedule.

:meth:`RetentionCommands.set_retention` records a tenant's policy (``domain.retention``): keep the
turns ingest stores for ``turn_days`` days (None: always, the default), and with ``extracted`` the
cards extraction made of them go too. :class:`RetentionWorker`, a thread of ``palimpsest serve``,
applies every tenant's policy each ``retention_interval_seconds``: the turns said before the
cut-off whose event card is not yet erased (read from the read models) are erased one by one
(``services.command.erasure``, basis ``retention``, a request id per turn, so a run cut short and run
again erases nothing twice), then the run is recorded (``Retention.Applied``). A run with nothing
to erase records nothing. One tenant's failure never stops the others'.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg import sql
from pydantic import Field

from domain.retention import Retention, check_turn_days
from infra.redact import described, traced
from services.command.application import BaseApplication
from services.command.commands import Command, Erase, WriteResult
from services.periodic import Periodic

log = logging.getLogger(__name__)

#: Seconds after the start of the first run (at most the interval).
FIRST_RUN_SECONDS = 60.0
#: The topics of a policy's events: the worker finds the tenants that have one by them.
POLICY_TOPICS = ("domain.retention:Retention.PolicySet", "domain.retention:Retention.PolicyChanged")


class SetRetention(Command):
    """Keep raw conversation turns ``turn_days`` days (None: keep every turn); ``extracted``:
    the cards extraction made of a turn are erased with it."""

    turn_days: int | None = Field(default=None, ge=1)
    extracted: bool = False
    set_by: str = Field(default="caller", min_length=1, max_length=200)


@dataclass(frozen=True)
class Policy:
    turn_days: int | None
    extracted: bool


class RetentionCommands(BaseApplication):
    """The retention use cases, mixed into :class:`services.command.memory.Palimpsest`."""

    def set_retention(self, tenant_id: str, command: SetRetention) -> WriteResult:
        days = check_turn_days(command.turn_days)
        retention_id = Retention.create_id(tenant_id)

        def decide(now: datetime) -> tuple[list[Retention], WriteResult]:
            retention = self.find(tenant_id, retention_id, Retention)
            if retention is None:
                retention = Retention(tenant_id=tenant_id, turn_days=days, extracted=command.extracted,
                                      set_by=command.set_by, timestamp=now)
            else:
                retention.change(turn_days=days, extracted=command.extracted, set_by=command.set_by,
                                 timestamp=now)
            return [retention], WriteResult(outcome="set", aggregate_id=retention_id)

        return self._execute(tenant_id, command, decide)

    def retention(self, tenant_id: str) -> Policy:
        """The tenant's policy: every turn kept when none was set."""
        found = self.find(tenant_id, Retention.create_id(tenant_id), Retention)
        return Policy(None, False) if found is None else Policy(found.turn_days, found.extracted)

    def record_retention_run(self, tenant_id: str, cutoff: datetime, turns: int, cards: int,
                             erasure_ids: tuple[UUID, ...]) -> None:
        def decide(now: datetime) -> tuple[list[Retention], WriteResult]:
            retention = self.load(tenant_id, Retention.create_id(tenant_id), Retention, "retention")
            retention.applied(cutoff=cutoff, turns=turns, cards=cards, erasure_ids=erasure_ids,
                              timestamp=now)
            return [retention], WriteResult(outcome="applied", aggregate_id=retention.id)

        self._execute(tenant_id, Command(), decide)

    def retention_tenants(self) -> list[str]:
        """The tenants that ever set a policy: the log is read from where the last call stopped."""
        known: dict[str, None] = getattr(self, "_policy_tenants", {})
        start: int = getattr(self, "_policy_read", 0) + 1
        while True:
            page = self.recorder.select_notifications(start=start, limit=1_000, topics=POLICY_TOPICS)
            for notification in page:
                known[str(self.mapper.to_domain_event(notification).tenant_id)] = None  # type: ignore[attr-defined]
            if page:
                start = page[-1].id + 1
            if len(page) < 1_000:
                self._policy_tenants, self._policy_read = known, start - 1
                return list(known)


class RetentionWorker(Periodic):
    """Applies every tenant's policy each ``interval`` seconds until stopped, at most ``batch``
    turns a tenant a run (the rest next run)."""

    name = "retention"

    def __init__(self, app: Any, read_models: Any, interval: float, batch: int = 500,
                 clock: Callable[[], datetime] | None = None, stop: threading.Event | None = None,
                 lease: Any = None) -> None:
        super().__init__(interval, stop, first=FIRST_RUN_SECONDS, lease=lease)
        self.app = app
        self.read = read_models
        self.batch = batch
        self.clock = clock or app.clock

    def apply_all(self) -> dict[str, int]:
        """One run over every tenant with a policy: turns erased by tenant."""
        erased: dict[str, int] = {}
        started, failed = time.monotonic(), 0
        try:
            tenants = self.app.retention_tenants()
        except Exception as error:  # the store is away: the next run tries again
            log.warning("retention: cannot list the tenants with a policy: %s", described(error))
            return erased
        for tenant in tenants:
            if self.stopping.is_set():
                break
            try:
                erased[tenant] = self.apply(tenant)
            except Exception as error:  # one tenant's failure never stops the others'
                failed += 1
                log.error("retention: applying tenant %s's policy failed: %s", tenant,
                          traced(error))
        log.info("retention: %d tenants with a policy (%d failed): %d turns erased in %.2f s",
                 len(tenants), failed, sum(erased.values()), time.monotonic() - started)
        return erased

    def apply(self, tenant_id: str) -> int:
        """Apply the tenant's policy now: how many turns it erased (not those an earlier run
        erased that the read models do not show yet)."""
        policy = self.app.retention(tenant_id)
        if policy.turn_days is None:
            return 0
        cutoff = self.clock() - timedelta(days=policy.turn_days)
        turns = self._expired(tenant_id, cutoff)
        erasure_ids: list[UUID] = []
        cards = erased = 0
        for ingestion_id, event_card_id, card_ids in turns:
            if self.stopping.is_set():
                break
            reason = f"raw turns are kept {policy.turn_days} days"
            result = self.app.erase(tenant_id, Erase(
                unit="card", card_id=event_card_id, basis="retention", reason=reason,
                requested_by="retention", request_id=f"retention:{ingestion_id}"))
            if not result.replayed:  # else erased by a run the read models do not show yet
                erased += 1
                erasure_ids.append(result.erasure_id)
            for card_id in card_ids if policy.extracted else ():  # a run cut short left some
                made = self.app.erase(tenant_id, Erase(
                    unit="card", card_id=card_id, basis="retention", reason=reason,
                    requested_by="retention", request_id=f"retention:{ingestion_id}:{card_id}"))
                if not made.replayed:
                    erasure_ids.append(made.erasure_id)
                    cards += 1
        if erasure_ids:
            self.app.record_retention_run(tenant_id, cutoff, erased, cards, tuple(erasure_ids))
            log.info("retention: tenant %s: %d turns said before %s erased (%d cards made of them)",
                     tenant_id, erased, cutoff.isoformat(), cards)
        return erased

    def _expired(self, tenant_id: str, cutoff: datetime) -> list[tuple[UUID, UUID, list[UUID]]]:
        """The turns said before ``cutoff`` whose event card is not erased yet, oldest first."""
        query = sql.SQL(
            "SELECT i.ingestion_id, i.event_card_id, i.card_ids FROM {s}.ingestions i "
            "JOIN {s}.cards c ON c.tenant_id = i.tenant_id AND c.card_id = i.event_card_id "
            "WHERE i.tenant_id = %s AND i.said_at < %s AND c.erased_at IS NULL "
            "ORDER BY i.said_at LIMIT %s").format(s=self.read.schema)
        with self.read.tenant(tenant_id) as conn:
            rows = conn.execute(query, (tenant_id, cutoff, self.batch)).fetchall()
        return [(row["ingestion_id"], row["event_card_id"], list(row["card_ids"] or ())) for row in rows]

    def tick(self) -> dict[str, int]:
        return self.apply_all()
