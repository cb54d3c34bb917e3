"""What every Palimpsest aggregate shares: its tenant on every event, and a clock passed in.

Every event carries ``tenant_id``. Its ``timestamp`` is the system time at which Palimpsest learned
what the event says (``recorded_at``); commands take ``now`` from the application's clock and hand it
to the event, so replays, backfills and tests see the same time the write saw.
"""

from __future__ import annotations

import hashlib
import hmac
from copy import copy
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate

NAMESPACE = uuid5(NAMESPACE_URL, "https://palimpsest.dev/ids")


def derived_id(*parts: object) -> UUID:
    """A deterministic id from its parts: the same parts always give the same id."""
    return uuid5(NAMESPACE, "\x1f".join(str(part) for part in parts))


#: The bits of a UUID's version field (the 13th hex digit) and of its variant.
_VERSION_BITS, _VARIANT_BITS = 0xF << 76, 0xC << 60


def keyed_id(key: bytes, *parts: object) -> UUID:
    """A deterministic id from its parts under a secret ``key``: HMAC-SHA-256, its first 16 bytes
    as a version-8 UUID. Only a holder of the key can compute it, so an id derived from personal
    text (a slot's subject and label) cannot be checked against a guess; the version tells it
    apart from :func:`derived_id`'s (version 5)."""
    text = "\x1f".join(str(part) for part in parts).encode("utf-8")
    number = int.from_bytes(hmac.new(key, text, hashlib.sha256).digest()[:16], "big")
    return UUID(int=(number & ~_VERSION_BITS & ~_VARIANT_BITS) | (8 << 76) | (0x8 << 60))


class TenantAggregate(Aggregate):
    tenant_id: str

    class Event(Aggregate.Event):
        tenant_id: str

    class Created(Event, Aggregate.Created):
        pass

    def __deepcopy__(self, memo: dict[int, Any]) -> TenantAggregate:
        """A copy for the repository's cache: one level deep. Aggregates keep only immutable
        values (frozen dataclasses, tuples, strings, times) in flat dicts, lists and sets, so
        copying the containers is enough and far cheaper than a full deep copy."""
        clone = object.__new__(type(self))
        for name, value in self.__dict__.items():
            clone.__dict__[name] = copy(value) if isinstance(value, dict | list | set) else value
        return clone

    def trigger_event(self, event_class: Any, **kwargs: Any) -> None:
        kwargs.setdefault("tenant_id", self.tenant_id)
        super().trigger_event(event_class, **kwargs)
