"""The cards projection on the embedded PostgreSQL, driven straight from the log: exactly once,
gaps filled, poison parked, crash safety, rebuild equals incremental, as-of, tenancy."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.range import Range

import projections.cards as cards_module
import projections.eventlog as eventlog_module
import projections.replay as replay_module
from infra.postgres import Database, projector_database
from infra.settings import Settings
from projections.ops import PutEdge
from projections.parking import Undecodable
from projections.projector import (
    Delivered,
    ProjectionError,
    ProjectionUnavailableError,
    Projector,
)
from projections.replay import (
    catch_up,
    events_table,
    make_projector,
    read_ahead,
    read_log,
    read_pages,
    rebuild,
    share_of,
)
from projections.schema import in_share
from projections.sinks import array_literal, range_literal
from services.command.commands import Arbitrate, IngestTurn, Remember, Verify
from services.command.memory import Palimpsest
from services.query.readmodels import ReadModels
from tests.integration.demo_support import demo_history
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration

COMPARED = ("nodes", "slots", "cards", "card_terms", "card_versions", "card_relations", "arbitration_queue",
            "ingestions", "projection_tracking")


@pytest.fixture
def reads(runtime_db: Database, pg_settings: Settings):  # type: ignore[no-untyped-def]
    models = ReadModels(runtime_db, pg_settings.read_schema)
    yield models
    models.close()


def dump(db: Database, schema: str, table: str, tenant: str | None = None) -> list[tuple[Any, ...]]:
    """Every row of a table, in a stable order, read as the administrator (no RLS)."""
    where = sql.SQL(" WHERE tenant_id = %s") if tenant else sql.SQL("")
    query = sql.SQL("SELECT * FROM {}.{}{}").format(
        sql.Identifier(schema), sql.Identifier(table), where)
    with db.connect() as conn:
        rows = conn.execute(query, (tenant,) if tenant else ()).fetchall()
    return sorted(rows, key=repr)


def indexes(db: Database, schema: str) -> list[tuple[str, str]]:
    with db.connect() as conn:
        rows = conn.execute("SELECT indexname, replace(indexdef, %s, '') FROM pg_indexes "
                            "WHERE schemaname = %s", (f"{schema}.", schema)).fetchall()
    return sorted(rows)


def deliveries(app: Palimpsest, tenant: str) -> list[Delivered]:
    head = app.recorder.max_notification_id() or 0
    return [d for d in read_log(app, 1, head) if d.tenant_id == tenant]


class TestExactlyOnce:
    def test_command_to_read_model(self, app, projector, reads) -> None:
        tenant = new_tenant()
        first = app.remember(tenant, state("address", "Taipei"))
        app.test_clock.advance(days=3)
        second = app.remember(tenant, state("address", "Kyoto"))
        assert reads.wait_for(tenant, second.position, timeout=0).stale_by > 0
        catch_up(projector, app)
        assert reads.wait_for(tenant, second.position, timeout=1).fresh
        current = reads.current(tenant, subject="user")
        assert [c.content for c in current] == ["Kyoto"], "a superseded card is never current"
        history = reads.history(tenant, first.card_id)
        assert [(h["version"], h["valid_to"] is None) for h in history] == [(1, True), (2, False)]

    def test_the_same_event_twice_changes_nothing(self, app, projector, admin_db, pg_settings) -> None:
        tenant = new_tenant()
        app.remember(tenant, state("address", "Taipei"))
        app.test_clock.advance(days=1)
        app.remember(tenant, state("address", "Kyoto"))
        batch = deliveries(app, tenant)
        projector.apply_batch(batch)
        before = {t: dump(admin_db, pg_settings.read_schema, t, tenant) for t in COMPARED}
        assert projector.apply_batch(batch) == 0
        assert projector.apply_batch(batch[1:] + batch[:1]) == 0
        after = {t: dump(admin_db, pg_settings.read_schema, t, tenant) for t in COMPARED}
        assert after == before

    def test_two_projectors_given_the_same_events_at_once_apply_them_once(
            self, app, projector, admin_db, pg_settings) -> None:  # type: ignore[no-untyped-def]
        """As when two consumer-group members overlap in a rebalance, or a starting member's
        catch-up meets another's batch: the second waits for the first's transaction, then
        finds the events applied."""
        tenant = new_tenant()
        remembered = app.remember(tenant, state("address", "Taipei"))
        projector.apply_batch(deliveries(app, tenant))
        app.test_clock.advance(days=1)
        app.verify(tenant, remembered.aggregate_id, Verify(card_id=remembered.card_id))
        verified = deliveries(app, tenant)[-1:]
        inside, commit = threading.Event(), threading.Event()
        real = projector.sink.apply_all

        def slow(cur: Any, ops: Any) -> None:  # applied, not committed yet
            real(cur, ops)
            cur.execute("SELECT 1").fetchone()  # the pipeline sends what it holds
            inside.set()
            commit.wait(timeout=10)

        projector.sink.apply_all = slow  # type: ignore[method-assign]
        first = ThreadPoolExecutor(max_workers=1).submit(projector.apply_batch, verified)
        assert inside.wait(timeout=10)
        other = make_projector(pg_settings, app, admin=admin_db)
        try:
            second = ThreadPoolExecutor(max_workers=1).submit(other.apply_batch, verified)
            time.sleep(0.3)
            commit.set()
            assert (first.result(timeout=10), second.result(timeout=10)) == (1, 0)
        finally:
            commit.set()
            other.close()
        versions = dump(admin_db, pg_settings.read_schema, "card_versions", tenant)
        assert len(versions) == 2, "recorded, then verified: once"

    def test_v3_before_v2_waits_for_v2(self, app, projector, reads) -> None:
        tenant = new_tenant()
        for day, city in enumerate(["Taipei", "Kyoto", "Osaka"]):
            app.test_clock.advance(days=day)
            app.remember(tenant, state("address", city))
        opened, taipei, kyoto, osaka = deliveries(app, tenant)
        projector.apply_batch([opened, taipei])
        assert projector.apply_batch([osaka]) == 2, "v3 is read from the log and applied first"
        assert projector.apply_batch([kyoto]) == 0
        assert [c.content for c in reads.current(tenant)] == ["Osaka"]

    def test_a_crash_inside_the_transaction_applies_nothing(self, app, projector, admin_db,
                                                            pg_settings, monkeypatch) -> None:
        tenant = new_tenant()
        app.remember(tenant, state("address", "Taipei"))
        app.remember(tenant, state("skills", "Python"))
        batch = deliveries(app, tenant)
        calls = {"n": 0}
        real = projector.sink.apply_all

        def crash_on_second(cur: Any, ops: Any) -> None:
            calls["n"] += 1
            if calls["n"] == 3:
                raise psycopg.OperationalError("connection lost mid-batch")
            real(cur, ops)

        monkeypatch.setattr(projector.sink, "apply_all", crash_on_second)
        with pytest.raises(ProjectionUnavailableError):
            projector.apply_batch(batch)
        assert dump(admin_db, pg_settings.read_schema, "cards", tenant) == []
        assert dump(admin_db, pg_settings.read_schema, "projection_tracking", tenant) == []
        assert dump(admin_db, pg_settings.read_schema, "projection_failures", tenant) == [], \
            "a lost connection is retried, not recorded as a poison event"
        monkeypatch.setattr(projector.sink, "apply_all", real)
        assert projector.apply_batch(batch) == len(batch)
        assert len(dump(admin_db, pg_settings.read_schema, "cards", tenant)) == 2

    def test_a_poison_event_parks_its_aggregate_and_the_batch_commits(
            self, app, projector, admin_db, pg_settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        tenant = new_tenant()
        app.remember(tenant, state("address", "Taipei"))
        app.remember(tenant, state("employer", "Acme"))
        batch = deliveries(app, tenant)
        original = cards_module.project

        def broken(event: Any) -> Any:
            if type(event).__name__ == "Remembered" and event.card.value == "Taipei":
                raise KeyError("handler bug")
            return original(event)

        monkeypatch.setattr(cards_module, "project", broken)
        assert projector.apply_batch(batch) == len(batch) - 1
        failures = failure_rows(admin_db, pg_settings, tenant)
        assert [(f["reason"], f["status"]) for f in failures] == [("projection", "parked")]
        assert failures[0]["error"] == "KeyError", "the exception's type, never its message"
        address = batch[0].event.originator_id
        tracked = dict((r[2], r[3]) for r in dump(admin_db, pg_settings.read_schema,
                                                  "projection_tracking", tenant))
        assert tracked[address] == 1, "opened, not past the parked Remembered"
        assert [r[13] for r in dump(admin_db, pg_settings.read_schema, "cards", tenant)] == ["Acme"]
        monkeypatch.setattr(cards_module, "project", original)
        assert projector.retry(address) == 1, "fixed, it applies"

    def test_a_row_the_database_refuses_parks_only_the_event_that_made_it(
            self, app, projector, admin_db, pg_settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        """The pipeline reports the refusal at the end of the batch; the batch is applied again
        with a savepoint per event, and only the event that made the row is parked."""
        tenant = new_tenant()
        app.remember(tenant, state("address", "Taipei"))
        app.remember(tenant, state("employer", "Acme"))
        batch = deliveries(app, tenant)
        culprit = batch[1]
        original = cards_module.project

        def forged(event: Any) -> Any:
            ops = list(original(event))
            if (event.originator_id, event.originator_version) == (
                    culprit.event.originator_id, culprit.event.originator_version):
                # an edge to a card that does not exist: the foreign key refuses it
                ops.append(PutEdge(tenant_id=tenant, src_id=uuid.uuid4(), dst_id=uuid.uuid4(),
                                   edge="related_to", recorded_at=event.timestamp))
            return ops

        monkeypatch.setattr(cards_module, "project", forged)
        assert projector.apply_batch(batch) == len(batch) - 1
        failures = failure_rows(admin_db, pg_settings, tenant)
        assert [f["notification_id"] for f in failures] == [culprit.notification_id]
        assert failures[0]["reason"] == "refused" and failures[0]["error"].startswith(
            "ForeignKeyViolation (sqlstate 23503, constraint "), "named by the schema, no row"
        assert [r[13] for r in dump(admin_db, pg_settings.read_schema, "cards", tenant)] == ["Acme"]
        monkeypatch.setattr(cards_module, "project", original)
        assert projector.retry(culprit.event.originator_id) == 1, "fixed, it applies once"
        assert projector.retry(culprit.event.originator_id) == 0
        assert len(dump(admin_db, pg_settings.read_schema, "cards", tenant)) == 2
        assert [f["status"] for f in failure_rows(admin_db, pg_settings, tenant)] == ["retried"]


def failure_rows(db: Database, settings: Settings, tenant: str) -> list[dict[str, Any]]:
    with db.connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql.SQL(
            "SELECT * FROM {}.projection_failures WHERE tenant_id = %s ORDER BY notification_id"
        ).format(sql.Identifier(settings.read_schema)), (tenant,)).fetchall()


class TestTime:
    def test_bitemporal_quadrants(self, app, projector, reads) -> None:
        tenant, clock = new_tenant(), app.test_clock
        t1 = clock.now - timedelta(days=10)
        app.remember(tenant, state("employer", "Acme", valid_from=t1))
        t2 = clock.now + timedelta(days=5)           # the job ended at t2 …
        t3 = clock.advance(days=20)                   # … which we learned at t3
        app.remember(tenant, state("employer", "Globex", valid_from=t2))
        catch_up(projector, app)
        before_t2, after_t2 = t2 - timedelta(days=1), t2 + timedelta(days=1)
        before_t3, after_t3 = t3 - timedelta(days=1), t3 + timedelta(seconds=1)

        def value(valid_at: Any, known_at: Any) -> list[str]:
            return [c.content for c in reads.as_of(tenant, valid_at, known_at, subject="user")]

        assert value(before_t2, before_t3) == ["Acme"]
        assert value(after_t2, before_t3) == ["Acme"], "before t3 we believed Acme still held"
        assert value(before_t2, after_t3) == ["Acme"]
        assert value(after_t2, after_t3) == ["Globex"]

    def test_event_time_round_trips(self, app, projector, reads) -> None:
        tenant = new_tenant()
        when = app.test_clock.now - timedelta(days=400, hours=3, microseconds=17)
        app.remember(tenant, Remember(kind="event", memory_type="event", content="graduation",
                                      occurred_at=when))
        catch_up(projector, app)
        (card,) = reads.current(tenant)
        assert card.occurred_at == when


def ingest_history(app: Palimpsest, tenant: str, now: datetime) -> None:
    """Turns at each status of the ``ingestions`` read model: applied, dead-lettered and re-run,
    received (one from last year)."""
    turns = [app.ingest_turn(tenant, IngestTurn(
        session_id="demo", turn_id=str(i), role=role, text=f"turn {i}", said_at=now - ago,
        timezone="Asia/Taipei")) for i, (role, ago) in enumerate(
            [("user", timedelta(minutes=2)), ("assistant", timedelta(minutes=1)),
             ("user", timedelta(days=400))])]
    app.record_extraction(tenant, turns[0].ingestion_id, [{"kind": "event"}], "m", 1)
    app.record_applied(tenant, turns[0].ingestion_id, [turns[0].event_card_id])
    app.record_dead_letter(tenant, turns[1].ingestion_id, "timeout", 3)
    app.ingest_rerun(tenant, turns[1].ingestion_id, "u")


class TestRebuild:
    @pytest.mark.parametrize(("batch", "workers"), [(500, 2), (7, 1), (1, 3)])
    def test_rebuild_equals_the_incremental_read_models(self, pg_settings, admin_db, projector,
                                                        reads, batch, workers) -> None:
        with demo_history(pg_settings) as (script, services, clock):
            demo_app = services.app
            case_id = script.cases[0]
            demo_app.arbitrate(script.tenant_id, Arbitrate(case_id=case_id, decision="accept_new",
                                                           decided_by="u"))
            ingest_history(demo_app, script.tenant_id, clock.now)
            catch_up(projector, demo_app, batch=batch)  # small batches change stored rows
            head = demo_app.recorder.max_notification_id()
            reached: list[int] = []
            report = rebuild(pg_settings, demo_app, into="palimpsest_read_check", workers=workers,
                             progress=lambda done, total: reached.append(done))
            logged = sum(1 for _ in read_log(demo_app, 1, head or 0))
        assert report.head == head and report.events == logged and not report.swapped, "the whole log"
        assert reached == sorted(reached) and reached[-1] == head, "progress grows to the head"
        for table in COMPARED:
            live = dump(admin_db, pg_settings.read_schema, table)
            rebuilt = dump(admin_db, "palimpsest_read_check", table)
            assert rebuilt == live, f"{table} differs after a rebuild"
        known = reads.current(script.tenant_id, subject="fibon")
        assert [c.content for c in known] == ["2026-11-22"]
        assert indexes(admin_db, "palimpsest_read_check") == indexes(
            admin_db, pg_settings.read_schema), "the rebuild builds every index after its copy"

    def test_a_rebuild_process_that_dies_stops_the_rebuild_and_says_why(
            self, pg_settings, app, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        tenant = new_tenant()
        for city in ("Taipei", "Kyoto", "Osaka"):
            app.remember(tenant, state("address", city))
        app.remember(tenant, Remember(kind="event", memory_type="event", content="met Hannah"))
        culprit = deliveries(app, tenant)[2]
        original = cards_module.project

        def broken(event: Any) -> Any:  # the processes are forked: they run this too
            if (event.originator_id, event.originator_version) == (
                    culprit.event.originator_id, culprit.event.originator_version):
                os._exit(9)
            return original(event)

        monkeypatch.setattr(cards_module, "project", broken)
        with pytest.raises(ProjectionError, match=r"exited \(9\) without a result"):
            rebuild(pg_settings, app, into="palimpsest_read_failed", workers=2)
        assert multiprocessing.active_children() == [], "no rebuild process is left behind"

    def test_a_schema_that_cannot_be_made_stops_the_rebuild_processes(  # type: ignore[no-untyped-def]
            self, pg_settings, app, monkeypatch) -> None:
        app.remember(new_tenant(), state("address", "Taipei"))

        def refused(*args: Any) -> None:
            raise OSError("no space left on device")

        monkeypatch.setattr(replay_module, "fresh_schema", refused)
        with pytest.raises(OSError, match="no space left"):
            rebuild(pg_settings, app, into="palimpsest_read_unmade", workers=2)
        assert multiprocessing.active_children() == [], "no rebuild process is left behind"

    def test_the_command_line_rebuilds_with_the_processes_asked_for(self, pg_settings, app,
                                                                     admin_db) -> None:
        tenant = new_tenant()
        app.remember(tenant, state("address", "Taipei"))
        env = {**os.environ, "PALIMPSEST_DATA_DIR": str(pg_settings.data_dir),
               "PALIMPSEST_AUTO_BOOTSTRAP": "false"}
        done = subprocess.run(
            [sys.executable, "-m", "services.entrypoints.cli", "rebuild", "--into", "palimpsest_read_cli",
             "--workers", "2"], env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        assert "events replayed" in done.stdout and "into palimpsest_read_cli" in done.stdout
        cards = dump(admin_db, "palimpsest_read_cli", "cards", tenant)
        assert len(cards) == 1
        refused = subprocess.run(
            [sys.executable, "-m", "services.entrypoints.cli", "rebuild", "--into", "palimpsest_read_cli",
             "--workers", "0"], env=env, capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode != 0 and "Traceback" not in refused.stderr

    def test_a_second_rebuild_into_the_same_schema_is_refused_while_one_runs(
            self, pg_settings, app, admin_db) -> None:  # type: ignore[no-untyped-def]
        app.remember(new_tenant(), state("address", "Taipei"))
        with admin_db.connect(autocommit=True) as running:  # what the first rebuild holds
            running.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))",
                            ("palimpsest rebuild palimpsest_read_busy",))
            with pytest.raises(ProjectionError, match="already running"):
                rebuild(pg_settings, app, into="palimpsest_read_busy", workers=1)
            other = rebuild(pg_settings, app, into="palimpsest_read_other", workers=1)
            assert other.events > 0, "another schema is not held up"
        assert rebuild(pg_settings, app, into="palimpsest_read_busy", workers=1).events > 0

    def test_a_share_is_the_same_in_python_and_in_sql(self, admin_db) -> None:
        ids = [uuid.uuid4() for _ in range(200)]
        with admin_db.connect() as conn:
            for shares in (2, 3, 4):
                in_sql = [conn.execute(sql.SQL("SELECT {}").format(in_share(
                    f"'{i}'::uuid", (share_of(i, shares), shares)))).fetchone()[0] for i in ids]
                assert all(in_sql), f"{shares} shares"
        assert {share_of(i, 3) for i in ids} == {0, 1, 2}

    def test_the_shares_of_the_log_split_it_by_aggregate(  # type: ignore[no-untyped-def]
            self, app, admin_db, monkeypatch) -> None:
        monkeypatch.setattr(eventlog_module, "PAGE", 5)  # many pages
        tenant = new_tenant()
        for n in range(12):
            app.remember(tenant, state("skills", f"skill {n}"))
            app.remember(tenant, Remember(kind="event", memory_type="event", content=f"met {n}"))
        head = app.recorder.max_notification_id() or 0
        logged = list(app.recorder.select_notifications(start=1, limit=head, stop=head))
        events = events_table(app.recorder)
        assert [n for page in read_pages(admin_db.connect, events, 1, head) for n in page] == logged
        shares = [[n for page in read_pages(admin_db.connect, events, 1, head, (part, 3))
                   for n in page] for part in range(3)]
        for part, share in enumerate(shares):
            assert [n.id for n in share] == sorted(n.id for n in share), "in log order"
            assert {share_of(n.originator_id, 3) for n in share} <= {part}
        assert sorted((n for share in shares for n in share), key=lambda n: n.id) == logged

    def test_copied_literals_read_back_as_the_values(self, admin_db) -> None:
        items = ["plain", 'a "quoted" word', "back\\slash", "comma, brace {}", "", "NULL", "資料庫"]
        at = datetime(2026, 9, 1, 9, 0, 0, 17, tzinfo=UTC)
        ranges = [Range(at, None, "[)"), Range(at, at, "[]"), Range(None, at, "(]"),
                  Range(at, at + timedelta(days=1), "[)"), Range(at, at, "[)")]
        with admin_db.connect() as conn:
            assert conn.execute("SELECT %s::text[]", (array_literal(items),)).fetchone()[0] == items
            assert conn.execute("SELECT %s::text[]", (array_literal([]),)).fetchone()[0] == []
            for value in ranges:
                same = conn.execute("SELECT %s::tstzrange = %s::tstzrange",
                                    (range_literal(value), value)).fetchone()[0]
                assert same, value

    def test_rebuild_as_known_at_a_past_moment(self, pg_settings, admin_db) -> None:
        with demo_history(pg_settings) as (script, services, clock):
            demo_app = services.app
            moment = clock.now - timedelta(days=40)   # day 20 of the script: Kyoto, not Kaohsiung
            report = rebuild(pg_settings, demo_app, known_at=moment)
        past = ReadModels(admin_db.as_role(pg_settings.runtime_role, None), report.schema)
        try:
            addresses = [c.content for c in past.current(script.tenant_id) if c.label == "address"]
        finally:
            past.close()
        assert addresses == ["Kyoto"]
        with admin_db.connect(autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(report.schema)))


class TestTenancy:
    def test_another_tenant_reads_nothing_from_any_read_model(self, app, projector, runtime_db,
                                                              pg_settings) -> None:
        owner, intruder = new_tenant(), new_tenant()
        app.remember(owner, state("address", "Taipei"))
        app.remember(owner, Remember(kind="knowledge", memory_type="note", content="secret plan",
                                     tags=("plan",)))
        catch_up(projector, app)
        tables = ("nodes", "slots", "cards", "card_versions", "card_relations",
                  "arbitration_queue", "projection_tracking", "projection_position",
                  "card_embeddings")
        with runtime_db.connect() as conn, conn.transaction():
            conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (intruder,))
            for table in tables:
                rows = conn.execute(sql.SQL("SELECT count(*) FROM {}.{}").format(
                    sql.Identifier(pg_settings.read_schema), sql.Identifier(table))).fetchone()
                assert rows[0] == 0, table
            conn.execute("SELECT set_config('palimpsest.tenant', %s, true)", (owner,))
            rows = conn.execute(sql.SQL("SELECT count(*) FROM {}.cards").format(
                sql.Identifier(pg_settings.read_schema))).fetchone()
            assert rows[0] == 2

    def test_forged_rows_and_edges_are_refused_by_the_database(self, app, projector, admin_db,
                                                               pg_settings) -> None:
        owner, intruder = new_tenant(), new_tenant()
        victim = app.remember(owner, state("address", "Taipei"))
        mine = app.remember(intruder, state("address", "Kyoto"))
        catch_up(projector, app)
        db = projector_database(admin_db, pg_settings)
        s = sql.Identifier(pg_settings.read_schema)
        with db.connect() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT set_config('palimpsest.tenant', %s, false)", (intruder,))
            conn.execute(sql.SQL("INSERT INTO {}.nodes VALUES (%s, gen_random_uuid(), 'card')")
                         .format(s), (owner,))
        with db.connect() as conn, pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("SELECT set_config('palimpsest.tenant', %s, false)", (intruder,))
            conn.execute(sql.SQL(
                "INSERT INTO {}.card_relations VALUES (%s, %s, %s, 'related_to', now())").format(s),
                (intruder, mine.card_id, victim.card_id))
        with runtime_db_connect(admin_db, pg_settings) as conn, pytest.raises(
                psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("UPDATE {}.cards SET content = 'x'").format(s))


def runtime_db_connect(admin_db: Database, settings: Settings) -> psycopg.Connection[Any]:
    return admin_db.as_role(settings.runtime_role, None).connect()


def test_projector_role_cannot_write_without_a_tenant(admin_db, pg_settings) -> None:
    db = projector_database(admin_db, pg_settings)
    with db.connect() as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(sql.SQL("INSERT INTO {}.nodes VALUES ('t-x', gen_random_uuid(), 'card')")
                     .format(sql.Identifier(pg_settings.read_schema)))


def test_projector_type_is_exported() -> None:
    assert Projector.LOG == "*"


class TestReindexing:
    def test_a_rename_and_a_correction_reindex_the_card(self, app, projector, admin_db,
                                                         pg_settings) -> None:
        from services.command.commands import CorrectEvent, Rename

        tenant = new_tenant()
        note = app.remember(tenant, Remember(kind="knowledge", memory_type="note",
                                             title="Redis caching", content="Cache hot keys",
                                             tags=("JWT",)))
        meeting = app.remember(tenant, Remember(kind="event", memory_type="event",
                                                content="Kickof in 台北", tags=("會議",)))
        app.rename(tenant, Rename(card_id=note.card_id, title="Valkey caching"))
        app.correct(tenant, CorrectEvent(card_id=meeting.card_id, description="Kickoff in 高雄",
                                         reason="wrong city"))
        catch_up(projector, app)
        with admin_db.connect() as conn:
            rows = dict(conn.execute(sql.SQL(
                "SELECT card_id, terms FROM {}.cards WHERE tenant_id = %s").format(
                sql.Identifier(pg_settings.read_schema)), (tenant,)).fetchall())
        assert "valkey" in rows[note.card_id] and "redis" not in rows[note.card_id]
        assert "json web token" in rows[note.card_id], "tags stay matched after a rename"
        assert "会议" in rows[meeting.card_id] and "高雄" in rows[meeting.card_id]
        assert "台北" not in rows[meeting.card_id]


def test_the_log_is_read_one_batch_ahead_in_order_and_an_error_comes_in_its_place(app, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    written = [app.remember(tenant, state("skills", f"skill {n}")) for n in range(7)]
    start, stop = written[0].position, written[-1].position
    expected = [d.notification_id for d in read_log(app, start, stop)]
    batches = [[d.notification_id for d in batch] for batch in read_ahead(app, start, stop, 3)]
    assert [i for batch in batches for i in batch] == expected
    assert [len(batch) for batch in batches[:-1]] == [3] * (len(batches) - 1)

    # an event that cannot be decoded comes in its place, standing for it (it parks its aggregate)
    bad = expected[4]
    real = app.mapper.to_domain_event

    def to_domain_event(stored: Any) -> Any:
        if getattr(stored, "id", None) == bad:
            raise ValueError("corrupt state")
        return real(stored)

    monkeypatch.setattr(app.mapper, "to_domain_event", to_domain_event)
    (undecodable,) = [d for batch in read_ahead(app, start, stop, 3) for d in batch
                      if d.notification_id == bad]
    assert isinstance(undecodable.event, Undecodable) and undecodable.event.error == "ValueError"
    assert undecodable.tenant_id == tenant, "its tenant is read from the stored JSON"

    # an error reading the log: the batches before it come first, then the error
    real_decode = eventlog_module.decode

    def failing(mapper: Any, notification: Any) -> Any:
        if notification.id == bad:
            raise RuntimeError("the log went away")
        return real_decode(mapper, notification)

    monkeypatch.setattr(eventlog_module, "decode", failing)
    got: list[list[int]] = []
    with pytest.raises(RuntimeError, match="the log went away"):
        for batch in read_ahead(app, start, stop, 3):
            got.append([d.notification_id for d in batch])
    assert got == [expected[:3]]
    # leaving early stops the reader: nothing hangs
    for _ in read_ahead(app, start, stop, 1):
        break
