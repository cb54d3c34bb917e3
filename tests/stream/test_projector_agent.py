"""The Faust agent through ``agent.test_context()``: Kafka replaced by Faust's in-memory channel,
the projector and PostgreSQL real."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from infra.relay import encode_message, encode_messages
from projections.faust_app import Outcome, create_faust_app
from projections.replay import make_projector
from services.factory import create_app
from services.query.readmodels import ReadModels
from tests.support import Clock, new_tenant, state

pytestmark = pytest.mark.integration


@pytest.fixture
def parts(pg_settings, admin_db, runtime_db):  # type: ignore[no-untyped-def]
    app = create_app(pg_settings, clock=Clock())
    projector = make_projector(pg_settings, app, admin=admin_db)
    reads = ReadModels(runtime_db, pg_settings.read_schema)
    yield app, projector, reads
    reads.close()
    projector.close()
    app.close()


def run(coroutine: Any) -> Any:
    return asyncio.new_event_loop().run_until_complete(coroutine)


def feed(worker: Any, values: list[bytes], until: Any = None) -> None:
    """Put ``values`` through the agent's test context; stay until ``until()`` (≤ 5 s)."""

    async def drive() -> None:
        async with worker.agents["project"].test_context() as agent:
            for value in values:
                await agent.put(value)
            for _ in range(100):
                if until is None or until():
                    break
                await asyncio.sleep(0.05)

    run(drive())


def test_agent_projects_relayed_messages(parts, pg_settings) -> None:
    app, projector, reads = parts
    tenant = new_tenant()
    written = [app.remember(tenant, state("skills", skill)) for skill in ("Python", "SQL")]
    notifications = app.recorder.select_notifications(start=written[0].position - 2, limit=10)
    values = [encode_message(n)[1] for n in notifications if n.id <= written[-1].position]
    outcome = Outcome()
    worker = create_faust_app(pg_settings, "127.0.0.1:9", app, projector, outcome,
                              on_failure=lambda: None)

    feed(worker, values,
         until=lambda: reads.wait_for(tenant, written[-1].position, timeout=0).fresh)
    assert reads.wait_for(tenant, written[-1].position, timeout=5).fresh
    assert sorted(c.content for c in reads.current(tenant)) == ["Python", "SQL"]
    assert outcome.failed is None
    data = Path(pg_settings.data_dir).resolve()
    assert data in Path(worker.conf.datadir).resolve().parents, "Faust keeps its files in ours"


def test_a_message_of_many_events_goes_in_transactions_of_projector_batch(
        parts, pg_settings, monkeypatch) -> None:
    app, projector, reads = parts
    tenant = new_tenant()
    skills = ("Python", "SQL", "Rust", "Go", "Kafka")
    written = [app.remember(tenant, state("skills", skill)) for skill in skills]
    notifications = app.recorder.select_notifications(start=written[0].position, limit=20)
    ours = [n for n in notifications if n.id <= written[-1].position]
    messages = encode_messages(ours, per_message=100)
    assert [count for _, _, count in messages] == [len(ours)]  # one tenant: one message
    sizes: list[int] = []
    real = projector.apply_batch
    monkeypatch.setattr(projector, "apply_batch", lambda batch: sizes.append(len(batch)) or real(batch))
    outcome = Outcome()
    small = pg_settings.model_copy(update={"projector_batch": 2})
    worker = create_faust_app(small, "127.0.0.1:9", app, projector, outcome, on_failure=lambda: None)

    feed(worker, [value for _, value, _ in messages],
         until=lambda: reads.wait_for(tenant, written[-1].position, timeout=0).fresh)
    assert reads.wait_for(tenant, written[-1].position, timeout=5).fresh
    assert sorted(c.content for c in reads.current(tenant)) == sorted(skills)
    assert sum(sizes) == len(ours) and max(sizes) == 2  # never more than projector_batch at once
    assert outcome.failed is None and outcome.events >= len(ours)  # plus a gap filled from the log


def test_agent_records_a_message_that_is_no_relayed_event_and_goes_on(parts, pg_settings,
                                                                      admin_db) -> None:
    app, projector, reads = parts
    tenant = new_tenant()
    written = app.remember(tenant, state("address", "Taipei"))
    notifications = app.recorder.select_notifications(start=written.position - 1, limit=2)
    values = [encode_message(n)[1] for n in notifications if n.id <= written.position]
    stopped: list[bool] = []
    outcome = Outcome()
    worker = create_faust_app(pg_settings, "127.0.0.1:9", app, projector, outcome,
                              on_failure=lambda: stopped.append(True))

    feed(worker, [b'{"notification_id": 1}', *values],
         until=lambda: reads.wait_for(tenant, written.position, timeout=0).fresh)
    assert reads.wait_for(tenant, written.position, timeout=5).fresh
    assert stopped == [] and outcome.failed is None
    with admin_db.connect() as conn:
        reason, error = conn.execute(
            f"SELECT reason, error FROM {pg_settings.read_schema}.projection_failures "
            "WHERE notification_id = -1").fetchone()
    assert reason == "message" and error == "RelayError"


def test_agent_retries_a_batch_while_the_database_is_away(parts, pg_settings, monkeypatch) -> None:
    from projections.projector import ProjectionUnavailableError

    app, projector, reads = parts
    tenant = new_tenant()
    written = app.remember(tenant, state("address", "Taipei"))
    notifications = app.recorder.select_notifications(start=written.position - 1, limit=2)
    values = [encode_message(n)[1] for n in notifications if n.id <= written.position]
    real, calls = projector.apply_batch, {"n": 0}

    def flaky(batch: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ProjectionUnavailableError("connection lost")
        return real(batch)

    monkeypatch.setattr(projector, "apply_batch", flaky)
    outcome = Outcome()
    worker = create_faust_app(pg_settings, "127.0.0.1:9", app, projector, outcome,
                              on_failure=lambda: None)

    feed(worker, values, until=lambda: outcome.batches)  # the retry waits 0.5 s first
    assert calls["n"] >= 2 and outcome.batches >= 1 and outcome.failed is None
    assert reads.wait_for(tenant, written.position, timeout=5).fresh


def test_agent_parks_poisoned_aggregates_and_projects_every_other(  # type: ignore[no-untyped-def]
        parts, pg_settings, admin_db, monkeypatch) -> None:
    """A handler bug and an undecodable event of tenant a: the worker does not stop; b and a's
    other aggregates are projected, a's poisoned aggregates parked with their later events."""
    from projections.failures import retry
    from tests.poison import failures, handler_bug, write_world

    app, projector, reads = parts
    app.test_clock = app.clock
    handler_bug(monkeypatch)
    world = write_world(app)
    head = max(world.last.values())
    notifications = [n for n in app.recorder.select_notifications(start=1, limit=10_000)
                     if n.id <= head]
    messages = encode_messages(notifications, per_message=100)
    stopped: list[bool] = []
    outcome = Outcome()
    worker = create_faust_app(pg_settings, "127.0.0.1:9", app, projector, outcome,
                              on_failure=lambda: stopped.append(True))

    feed(worker, [value for _, value, _ in messages],
         until=lambda: all(reads.wait_for(t, p, timeout=0).fresh for t, p in world.last.items()))
    for tenant, position in world.last.items():
        assert reads.wait_for(tenant, position, timeout=5).fresh
    assert stopped == [] and outcome.failed is None
    assert sorted(c.content for c in reads.current(world.b)) == ["Kyoto", "Rust", "met Ming"]
    assert sorted(c.content for c in reads.current(world.a)) == ["Taipei", "met Hannah"]
    parked = [(f["originator_version"], f["reason"]) for f in
              failures(admin_db, pg_settings.read_schema, world.a) if f["status"] == "parked"]
    assert parked == [(2, "projection"), (1, "undecodable"), (3, "waiting")]
    monkeypatch.undo()  # fixed: the live read models are left as a rebuild makes them
    retry(projector, app)
