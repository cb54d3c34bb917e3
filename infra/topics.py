"""Kafka topics: created once with the configured partition count, never changed."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

log = logging.getLogger(__name__)


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1) -> bool:
    """Create ``topic`` with ``partitions`` partitions unless it exists. True when it was created.

    An existing topic is left alone (a different partition count is logged, never changed). A
    broker that does not answer fails it within about 5 s (kafka-python would wait 30): the
    broker's keeper calls it after each restart, and the relay creates the topic too."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=10_000, client_id="palimpsest-admin",
        bootstrap_timeout_ms=5_000, reconnect_backoff_max_ms=1_000,
    )
    try:
        return ensure_topic_with(admin, topic, partitions, replication_factor)
    finally:
        with contextlib.suppress(Exception):
            admin.close()


def ensure_topic_with(admin: Any, topic: str, partitions: int, replication_factor: int = 1) -> bool:
    """:func:`ensure_topic` with an open ``KafkaAdminClient``."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    described = admin.describe_topics([topic])
    found = [t for t in described if t.get("name") == topic and t.get("error_code") == 0]
    if found:
        existing = len(found[0].get("partitions") or [])
        if existing != partitions:
            log.warning("topic %s has %d partitions, not %d", topic, existing, partitions)
        return False
    try:
        admin.create_topics([NewTopic(topic, partitions, replication_factor)])
    except TopicAlreadyExistsError:
        return False
    log.info("created topic %s with %d partitions", topic, partitions)
    return True
