"""A poison event in a running server's event store, as a log written by an older release holds:
``python -m tests.plant_poison plant TENANT`` writes a knowledge card for ``TENANT`` whose stored
event names a topic no module has (the projector cannot decode it and parks it) and prints
``{"card_id", "topic"}``; ``python -m tests.plant_poison restore CARD_ID TOPIC`` gives the stored
event its topic back, as the administrator, past the append-only trigger for that one statement
(standing in for the fix a deploy brings: a module that decodes it), so a retry applies it. Opens
the database the environment names (``PALIMPSEST_DATA_DIR`` of the running server)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any
from uuid import UUID

from psycopg import sql

from infra.postgres import EVENTS_TABLE, admin_database
from infra.settings import Settings
from services.command.commands import Remember
from services.factory import create_app
from tests.poison import MARK, marked, stored_as
from tests.support import LOST_TOPIC

LOST = LOST_TOPIC + "Nowhere.Created"


def plant(tenant: str) -> dict[str, str]:
    topics: list[str] = []

    def lose_topic(event: Any, store: Any) -> Any:
        stored = store(event)
        if not marked(event):
            return stored
        topics.append(stored.topic)
        return replace(stored, topic=LOST)

    app = create_app(Settings())
    try:
        with stored_as(app, lose_topic):
            written = app.remember(tenant, Remember(kind="knowledge", memory_type="note",
                                                    title="From an older release", content=MARK))
    finally:
        app.close()
    return {"card_id": str(written.card_id), "topic": topics[0]}


def restore(card_id: UUID, topic: str) -> int:
    settings = Settings()
    table = sql.Identifier(settings.event_schema, EVENTS_TABLE)
    with admin_database(settings).connect() as conn, conn.transaction():
        conn.execute(sql.SQL("ALTER TABLE {} DISABLE TRIGGER palimpsest_append_only").format(table))
        done = conn.execute(sql.SQL("UPDATE {} SET topic = %s WHERE originator_id = %s "
                                    "AND topic = %s").format(table), (topic, card_id, LOST))
        conn.execute(sql.SQL("ALTER TABLE {} ENABLE TRIGGER palimpsest_append_only").format(table))
        return done.rowcount


def main(argv: list[str]) -> None:
    match argv:
        case ["plant", tenant]:
            print(json.dumps(plant(tenant)))
        case ["restore", card_id, topic]:
            print(json.dumps({"restored": restore(UUID(card_id), topic)}))
        case _:
            sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
