"""Helpers the test tiers share."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

from services.command.application import BaseApplication
from services.command.commands import Remember

START = datetime(2026, 6, 1, 9, tzinfo=UTC)
#: The topic of the events the poison tests make undecodable: no module has it.
LOST_TOPIC = "palimpsest.gone:"


@dataclass
class Clock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


def new_tenant() -> str:
    return f"t-{uuid4().hex[:12]}"


def state(label: str, value: str, subject: str = "user", **extra: Any) -> Remember:
    return Remember(
        kind="state",
        memory_type=extra.pop("memory_type", "fact"),
        subject=subject,
        label=label,
        content=value,
        **extra,
    )


def stored_count(app: BaseApplication) -> int:
    return app.recorder.max_notification_id() or 0


def all_events(app: BaseApplication) -> list[Any]:
    """Every stored event, decoded; the undecodable ones the poison tests store (tests.poison)
    apart."""
    notifications = app.recorder.select_notifications(start=1, limit=100_000)
    return [app.mapper.to_domain_event(n) for n in notifications
            if not n.topic.startswith(LOST_TOPIC)]
