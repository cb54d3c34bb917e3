"""What the relay puts on Kafka, and how a consumer reads it back.

* key: the event's tenant (see :func:`message_key`), so a tenant's events — and so each aggregate's
  — stay in log order in one partition;
* value: JSON ``{"notification_id", "originator_id", "originator_version", "topic", "state"}``
  with ``state`` the base64 of the stored (transcoded, possibly compressed) state bytes; or, for
  consecutive events of one key, ``{"events": [those objects, in log order]}`` — up to
  ``events_per_message`` of them and about :data:`MESSAGE_BYTES` (a consumer pays per message, not
  per byte: Faust's handling of one message costs as much as projecting its event).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification, StoredEvent

_MESSAGE_FIELDS = ("notification_id", "originator_id", "originator_version", "topic", "state")
#: About how many bytes of events one message carries (Kafka's default limit is 1 MB).
MESSAGE_BYTES = 256 * 1024


class RelayError(RuntimeError):
    """A message the relay cannot encode or decode."""


# --- the message ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredEventMessage:
    """One relayed notification, as a consumer reads it back from Kafka."""

    notification_id: int
    originator_id: UUID
    originator_version: int
    topic: str
    state: bytes

    def to_stored_event(self) -> StoredEvent:
        """For ``app.mapper.to_domain_event``."""
        return StoredEvent(
            originator_id=self.originator_id, originator_version=self.originator_version,
            topic=self.topic, state=self.state,
        )

    def to_notification(self) -> Notification:
        """With its notification id, e.g. for eventsourcing's ``Tracking``."""
        return Notification(
            id=self.notification_id, originator_id=self.originator_id,
            originator_version=self.originator_version, topic=self.topic, state=self.state,
        )


def encode_message(notification: Notification) -> tuple[bytes, bytes]:
    """``(key, value)`` of a Kafka message carrying ``notification`` alone."""
    return message_key(notification), json.dumps(_body(notification), separators=(",", ":")).encode()


def message_key(notification: Notification) -> bytes:
    """The tenant: all of a tenant's events share a partition, so they arrive in log order —
    an aggregate's versions in order, and a card before the edges other cards draw to it."""
    try:
        tenant = json.loads(bytes(notification.state))["tenant_id"]
    except (ValueError, KeyError, TypeError):
        tenant = None
    return str(tenant or notification.originator_id).encode()


def encode_messages(notifications: Sequence[Notification], per_message: int
                    ) -> list[tuple[bytes, bytes, int]]:
    """``(key, value, events)`` of the Kafka messages carrying ``notifications``: consecutive
    events of one key share a message, in log order, up to ``per_message`` events and about
    :data:`MESSAGE_BYTES`; a key's messages come in log order too."""
    open_: dict[bytes, tuple[list[dict[str, Any]], int]] = {}
    out: list[tuple[bytes, bytes, int]] = []

    def close(key: bytes) -> None:
        bodies, _ = open_.pop(key)
        body = bodies[0] if len(bodies) == 1 else {"events": bodies}
        out.append((key, json.dumps(body, separators=(",", ":")).encode(), len(bodies)))

    for notification in notifications:
        key, body = message_key(notification), _body(notification)
        size = len(body["state"]) + 200
        bodies, total = open_.get(key, ([], 0))
        if bodies and (len(bodies) >= per_message or total + size > MESSAGE_BYTES):
            close(key)
            bodies, total = [], 0
        bodies.append(body)
        open_[key] = (bodies, total + size)
    for key in list(open_):
        close(key)
    return out


def _body(notification: Notification) -> dict[str, Any]:
    return {
        "notification_id": int(notification.id),
        "originator_id": str(notification.originator_id),
        "originator_version": int(notification.originator_version),
        "topic": notification.topic,
        "state": base64.b64encode(bytes(notification.state)).decode("ascii"),
    }


def decode_messages(value: bytes) -> list[StoredEventMessage]:
    """The notifications a relayed Kafka message value carries, in log order."""
    try:
        body = json.loads(value)
        if isinstance(body, dict) and isinstance(body.get("events"), list):
            return [_decoded(each) for each in body["events"]]
        return [_decoded(body)]
    except (ValueError, TypeError, AttributeError, binascii.Error) as error:
        raise RelayError(f"not a relayed message: {error}") from error


def decode_message(value: bytes) -> StoredEventMessage:
    """The one notification a relayed Kafka message value carries."""
    messages = decode_messages(value)
    if len(messages) != 1:
        raise RelayError(f"a relayed message of {len(messages)} events, not one")
    return messages[0]


def _decoded(body: Any) -> StoredEventMessage:
    missing = [name for name in _MESSAGE_FIELDS if name not in body]
    if missing:
        raise RelayError(f"relayed message without {', '.join(missing)}")
    return StoredEventMessage(
        notification_id=int(body["notification_id"]),
        originator_id=UUID(body["originator_id"]),
        originator_version=int(body["originator_version"]),
        topic=str(body["topic"]),
        state=base64.b64decode(body["state"], validate=True),
    )
