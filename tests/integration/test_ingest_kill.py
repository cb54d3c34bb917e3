"""The extraction worker as its own process (``palimpsest ingest-worker``), killed with SIGKILL in
the middle of a batch and started again: every turn's cards exist exactly once.

The worker commits its Kafka offsets only after a batch's turns are applied; the killed batch is
read again, and the turns it had applied are answered from the Ingestion's status (a turn's cards
are saved with its Applied, in one transaction), not written twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

from domain.event_card import EventCard
from domain.ingestion import Ingestion
from infra.relay import Relay
from services.command.commands import IngestTurn
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_llm_fixture  # noqa: F401
from tests.support import all_events, new_tenant

TURNS = 40


def fact(text: str) -> Reply:
    """One event card per turn, named after it; answered slowly enough to kill mid-batch."""
    return Reply.json({"candidates": [{
        "kind": "event", "memory_type": "event", "subject": "user", "label": "log",
        "value": f"fact of {text}", "cardinality_hint": None, "tags": [], "occurred_at_hint": None,
        "confidence": 0.9, "title": None, "related_concepts": []}]}, delay=0.05)


def applied(app: Any, tenant: str, turns: list[Any]) -> int:
    return sum(app.load(tenant, t.ingestion_id, Ingestion).status == "applied" for t in turns)


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "services.entrypoints.cli", "ingest-worker"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_until(condition: Any, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s; worker log:\n" + \
            log.read_text(errors="replace")[-3000:]
        time.sleep(0.05)


def test_a_worker_killed_mid_batch_leaves_every_turns_cards_once(  # type: ignore[no-untyped-def]
        app, pg_settings, broker, fake_llm: FakeOpenAIServer, tmp_path: Path) -> None:
    tenant, name = new_tenant(), f"ingest-{uuid4().hex[:8]}"
    fake_llm.responder = fact
    said = app.test_clock.now - timedelta(days=1)
    turns = [app.ingest_turn(tenant, IngestTurn(session_id="s", turn_id=str(i), role="user",
                                                text=f"turn {i}", said_at=said, timezone="UTC"))
             for i in range(TURNS)]
    settings = pg_settings.model_copy(update={"kafka_ingest_topic": name})
    relay = Relay.for_ingest(app.recorder, settings, broker.bootstrap, name=name)
    stop = threading.Event()
    relaying = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    relaying.start()
    env = {**os.environ, "PALIMPSEST_DATA_DIR": str(pg_settings.data_dir),
           "PALIMPSEST_AUTO_BOOTSTRAP": "false", "PALIMPSEST_KAFKA_BOOTSTRAP": broker.bootstrap,
           "PALIMPSEST_KAFKA_INGEST_TOPIC": name, "PALIMPSEST_INGEST_GROUP": name,
           "PALIMPSEST_INGEST_BATCH": "10", "PALIMPSEST_LLM_BASE_URL": fake_llm.base_url,
           "PALIMPSEST_LLM_MODEL": "scripted", "PALIMPSEST_LLM_BACKOFF_SECONDS": "0.01"}
    log = tmp_path / "worker.log"
    worker = start_worker(env, log)
    try:
        wait_until(lambda: applied(app, tenant, turns) >= 5, 90, "5 turns applied", log)
        worker.send_signal(signal.SIGKILL)  # mid-batch: batches are 10 turns, ~0.05 s each
        worker.wait(10)
        killed_at = applied(app, tenant, turns)
        assert killed_at < TURNS, "the worker was killed after the last turn: nothing tested"
        worker = start_worker(env, log)
        wait_until(lambda: applied(app, tenant, turns) == TURNS, 120, "every turn applied", log)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()
        stop.set()
        relaying.join(timeout=10)
        relay.close()
    written = Counter(e.description for e in all_events(app)
                      if isinstance(e, EventCard.Recorded) and e.tenant_id == tenant
                      and e.description.startswith("fact of "))
    assert written == Counter({f"fact of turn {i}": 1 for i in range(TURNS)})
    for turn in turns:
        assert len(app.load(tenant, turn.ingestion_id, Ingestion).card_ids) == 1
