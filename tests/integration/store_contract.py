"""What the LangGraph store's tests share: a Palimpsest server to talk to, and the two stores
under one contract.

:class:`StoreServer` is the REST edge of one ``Services`` on the session's embedded PostgreSQL,
served by uvicorn on a loopback port (``serve``'s :class:`HttpServer`), with the incremental
projector following the event log in a thread of its own, as ``palimpsest serve``'s projector
does: a write reaches the read models by itself, and a read that names the write's position waits
for it. Nothing is faked: the event store, the key store, the read models and the projections are
the real ones.

``InMemoryStore`` is LangGraph's reference; :func:`reference_store` gives it an index of
deterministic word vectors, so a search with a query ranks as a search should.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections.abc import Sequence
from typing import Any

from langgraph.store.base import IndexConfig
from langgraph.store.memory import InMemoryStore

from infra.postgres import Database
from infra.settings import Settings

SCOPES_ALL = ("memory:read", "memory:write", "memory:admin", "memory:erase")
READ_WRITE = ("memory:read", "memory:write")


class StoreServer:
    """A Palimpsest server in this process: REST at :attr:`url`, the projector in a thread."""

    def __init__(self, settings: Settings, admin: Database) -> None:
        from projections.replay import make_projector
        from services.bootstrap import build_services
        from services.entrypoints.api import create_api
        from services.entrypoints.http import HttpServer

        self.services = build_services(settings)
        self.projector = make_projector(settings, self.services.app, admin=admin)
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._project, name="projector", daemon=True)
        self._thread.start()
        self.http = HttpServer(lambda: create_api(self.services), "127.0.0.1", 0)
        self.http.start()
        self.url = self.http.url

    def _project(self) -> None:
        from projections.replay import catch_up

        try:
            while not self._stop.wait(0.01):
                catch_up(self.projector, self.services.app)
        except BaseException as error:  # kept for close() to raise: a dead projector fails the tests
            self.failure = error

    def key(self, tenant: str, *scopes: str) -> str:
        """A new key of ``tenant`` with ``scopes`` (read and write by default)."""
        return self.services.keys.create(tenant, scopes or READ_WRITE, "langgraph store test")[1]

    def close(self) -> None:
        self.http.stop()
        self._stop.set()
        self._thread.join(30)
        self.projector.close()
        self.services.close()
        if self.failure is not None:
            raise AssertionError("the projector thread failed") from self.failure


# ---- the reference ----------------------------------------------------------------------------

DIMS = 64


def words_vector(text: str) -> list[float]:
    """A bag of words hashed into :data:`DIMS` buckets, normalised: texts sharing words are near."""
    vector = [0.0] * DIMS
    for word in re.findall(r"\w+", text.lower()):
        vector[hashlib.sha256(word.encode()).digest()[0] % DIMS] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def embed(texts: Sequence[str]) -> list[list[float]]:
    return [words_vector(text) for text in texts]


def reference_store() -> InMemoryStore:
    index: IndexConfig = {"dims": DIMS, "embed": embed}
    return InMemoryStore(index=index)


def snapshot(item: Any) -> tuple[Any, ...] | None:
    """An item as the contract compares it: where it is and what it holds (not its times)."""
    return None if item is None else (item.namespace, item.key, item.value)
