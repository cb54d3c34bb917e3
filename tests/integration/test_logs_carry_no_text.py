"""Logs say what happened to which id, never what it said (STYLE rule 18), on the embedded
PostgreSQL with every logger at DEBUG: two people's story (``tests.erasure_story``) told,
projected and embedded; turns extracted by the scripted model — a garbage answer quoting the
turn, a 500, a candidate validation drops, then the cards, and a turn dead-lettered; an event
whose projection raises an error quoting its value, and a row the database refuses while quoting
it; then one person erased and everything projected again. No canary of either person is in the
captured log output, nor in ``projection_failures``."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from psycopg import sql

import projections.cards as cards_module
from infra.llm import OpenAIChatModel
from infra.postgres import Database
from infra.settings import Settings
from projections.ops import PutEdge
from projections.replay import catch_up
from services.command.commands import IngestTurn
from services.ingest.extraction import Extractor
from services.ingest.worker import IngestWorker
from tests.erasure_story import forget, person, tell
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake_llm_fixture  # noqa: F401
from tests.integration.test_erasure_readmodels import Words, embed
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration


def candidate(value: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "state", "memory_type": "fact", "subject": "user", "label": "favourite_dish",
            "value": value, "cardinality_hint": None, "tags": [], "occurred_at_hint": None,
            "confidence": 0.9, "title": None, "related_concepts": [], **extra}


def ingest(app: Any, tenant: str, session: str, turn: str, text: str) -> Any:
    return app.ingest_turn(tenant, IngestTurn(
        session_id=session, turn_id=turn, role="user", text=text,
        said_at=datetime(2026, 5, 1, 9, tzinfo=UTC), timezone="UTC", agent_id="assistant-1"))


def extract(app: Any, settings: Settings, fake_llm: FakeOpenAIServer, tenant: str, session: str,
            prefix: str) -> None:
    """A turn extracted after a garbage answer, a 500 and a dropped candidate; another turn
    dead-lettered by answers that are garbage every time. Each answer quotes the canaries."""
    model = OpenAIChatModel(model="scripted", base_url=fake_llm.base_url, timeout=2)
    tuned = settings.model_copy(update={"llm_retries": 2, "llm_backoff_seconds": 0.01,
                                        "llm_backoff_max_seconds": 0.02})
    worker = IngestWorker(app, Extractor(model, tuned))
    first = ingest(app, tenant, session, "x1", f"I cook {prefix}dish every sunday")
    fake_llm.script(Reply.json({"answers": f"{prefix}garbage"}))
    fake_llm.fail_next(1)
    fake_llm.script(Reply.json({"candidates": [
        candidate(f"{prefix}dish"), candidate(f"{prefix}dropped", kind=f"{prefix}kind"),
        candidate(f"{prefix}event", kind="event", memory_type="event", label="log",
                  tags=[f"{prefix}tag"])]}))
    assert worker.handle(tenant, first.ingestion_id) == "applied"
    second = ingest(app, tenant, session, "x2", f"and {prefix}lost too")
    fake_llm.script(*[Reply.text(f"no json {prefix}lost") for _ in range(3)])
    assert worker.handle(tenant, second.ingestion_id) == "dead_letter"


def break_projection(monkeypatch: pytest.MonkeyPatch, prefix: str) -> Any:
    """The projection of a card holding ``prefix`` raises an error quoting its text, and of
    another adds a row the database refuses, quoting it ("Failing row contains …"); returns
    the projection as it was, to fix it with."""
    original = cards_module.project

    def broken(event: Any) -> Any:
        value = str(getattr(getattr(event, "card", None), "value", ""))
        if value.endswith("bug"):
            raise KeyError(f"handler bug on {value}")
        ops = list(original(event))
        if value.endswith("refused"):
            ops.append(PutEdge(tenant_id=str(event.tenant_id), src_id=uuid4(), dst_id=uuid4(),
                               edge=value, recorded_at=None))  # type: ignore[arg-type]
        return ops

    monkeypatch.setattr(cards_module, "project", broken)
    return original


def parked_aggregates(admin: Database, settings: Settings, tenant: str) -> list[Any]:
    with admin.connect() as conn:
        return [row[0] for row in conn.execute(sql.SQL(
            "SELECT DISTINCT originator_id FROM {}.projection_failures WHERE tenant_id = %s "
            "AND status = 'parked'").format(sql.Identifier(settings.read_schema)),
            (tenant,)).fetchall()]


def failure_texts(admin: Database, settings: Settings, tenant: str) -> str:
    with admin.connect() as conn:
        rows = conn.execute(sql.SQL("SELECT f::text FROM {}.projection_failures f "
                                    "WHERE tenant_id = %s").format(
            sql.Identifier(settings.read_schema)), (tenant,)).fetchall()
    return "\n".join(row[0] for row in rows).lower()


def test_an_erasure_story_logged_at_debug_carries_no_text(  # type: ignore[no-untyped-def]
        pg_settings, admin_db, app, projector, fake_llm, monkeypatch, caplog) -> None:
    caplog.set_level(logging.DEBUG)  # the root logger: every logger that does not set its own
    tenant, clock = new_tenant(), app.test_clock
    mira, noah = tell(app, tenant, clock, person("mira")), tell(app, tenant, clock, person("noah"))
    extract(app, pg_settings, fake_llm, tenant, mira.session, mira.prefix)
    original = break_projection(monkeypatch, mira.prefix)
    for what in ("bug", "refused"):
        app.remember(tenant, state(f"worry_{what}", f"{mira.prefix}{what}", subject=mira.subject))
    words = Words()
    catch_up(projector, app)
    embed(pg_settings, admin_db, app, words)
    parked = failure_texts(admin_db, pg_settings, tenant)
    assert "keyerror" in parked and "notnullviolation" in parked, "both were parked"
    monkeypatch.setattr(cards_module, "project", original)  # fixed: what was parked applies
    for row in parked_aggregates(admin_db, pg_settings, tenant):
        projector.retry(row)
    assert parked_aggregates(admin_db, pg_settings, tenant) == []
    forget(app, tenant, mira)
    catch_up(projector, app)
    embed(pg_settings, admin_db, app, words)

    canaries = [*mira.canaries, *noah.canaries, mira.prefix, noah.prefix]
    logged = caplog.text.lower()
    assert "parked" in logged and "dropped by validation" in logged, "the story was logged"
    assert [c for c in canaries if c in logged] == [], "no text in any log line"
    assert [c for c in canaries if c in failure_texts(admin_db, pg_settings, tenant)] == []


def test_a_failure_message_an_earlier_release_kept_is_cut_to_its_type(  # type: ignore[no-untyped-def]
        pg_settings, admin_db) -> None:
    """Starting (the read schema made again) cuts "Type: message" to the type; messages made of
    ids stay as they are."""
    from projections.schema import create_read_schema

    schema, canary = "palimpsest_read_old_failures", f"zqold{uuid4().hex[:6]}"
    kept = "waits for v1 of its aggregate (notification 7, projection)"
    with admin_db.connect(autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        create_read_schema(conn, schema, reader=pg_settings.runtime_role,
                           writer=pg_settings.projector_role, indexes=False)
        conn.execute(sql.SQL(
            "INSERT INTO {}.projection_failures (projection, tenant_id, notification_id, error) "
            "VALUES ('cards', 't', 7, %s), ('cards', 't', 8, %s)").format(sql.Identifier(schema)),
            (f"NotNullViolation: null value … Failing row contains ({canary}, null).", kept))
        try:
            create_read_schema(conn, schema, reader=pg_settings.runtime_role,
                               writer=pg_settings.projector_role, indexes=False)
            errors = [row[0] for row in conn.execute(sql.SQL(
                "SELECT error FROM {}.projection_failures ORDER BY notification_id").format(
                sql.Identifier(schema))).fetchall()]
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    assert errors == ["NotNullViolation", kept]
