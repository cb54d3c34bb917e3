"""Poison events in the log (decision 0007): each parks its own aggregate, visibly, while every
other aggregate and tenant is projected — by the catch-up and the rebuild alike (the Faust agent:
tests/stream); retried after a fix, skipped with a decision a rebuild honours; NUL bytes of old
events projected sanitised."""

from __future__ import annotations

import os
from typing import Any

import pytest
from psycopg import sql
from typer.testing import CliRunner

from infra.postgres import Database, projector_database
from infra.settings import Settings
from projections.failures import ParkedEventNotFoundError, retry, skip
from projections.replay import catch_up, decisions, project_into, rebuild
from projections.status import parked, read_status
from services.command.commands import Remember
from services.command.memory import Palimpsest
from services.entrypoints.cli import cli
from services.query.readmodels import ReadModels
from tests.poison import (
    MARK,
    failures,
    handler_bug,
    stored_as,
    with_nul,
    write_link_to_broken,
    write_world,
)
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration

#: The read models a rebuild must equal, per tenant (the failures apart: see ``failures``).
TABLES = ("nodes", "slots", "cards", "card_terms", "card_versions", "card_relations",
          "arbitration_queue", "projection_tracking", "projection_position")


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch, projector: Any, app: Palimpsest):  # type: ignore[no-untyped-def]
    """The handler bug, in for the test; then fixed, and every parked aggregate retried, so the
    live read models are what a rebuild makes of the log (other tests compare them)."""
    handler_bug(monkeypatch)
    yield
    monkeypatch.undo()
    retry(projector, app)


@pytest.fixture
def reads(runtime_db: Database, pg_settings: Settings):  # type: ignore[no-untyped-def]
    models = ReadModels(runtime_db, pg_settings.read_schema)
    yield models
    models.close()


def rows(db: Database, schema: str, table: str, tenant: str) -> list[tuple[Any, ...]]:
    """A tenant's rows of ``table`` (of a position: not when it was written)."""
    columns = sql.SQL("projection, tenant_id, position" if table == "projection_position" else "*")
    query = sql.SQL("SELECT {} FROM {}.{} WHERE tenant_id = %s").format(
        columns, sql.Identifier(schema), sql.Identifier(table))
    with db.connect() as conn:
        return sorted(conn.execute(query, (tenant,)).fetchall(), key=repr)


def contents(db: Database, schema: str, tenant: str) -> list[str]:
    with db.connect() as conn:
        return sorted(r[0] for r in conn.execute(sql.SQL(
            "SELECT content FROM {}.cards WHERE tenant_id = %s").format(sql.Identifier(schema)),
            (tenant,)).fetchall())


def assert_rebuilt_equals_live(db: Database, settings: Settings, schema: str, *tenants: str
                               ) -> None:
    for tenant in tenants:
        for table in TABLES:
            assert rows(db, schema, table, tenant) == rows(
                db, settings.read_schema, table, tenant), f"{table} of {tenant}"
        assert failures(db, schema, tenant) == failures(db, settings.read_schema, tenant)


def parked_of(db: Database, settings: Settings, tenant: str) -> list[tuple[Any, ...]]:
    return [(f["originator_version"], f["reason"]) for f in failures(db, settings.read_schema,
                                                                      tenant, resolved=False)
            if f["status"] == "parked"]


def test_the_catch_up_parks_the_poisoned_aggregates_and_projects_every_other(
        app, projector, broken, reads, admin_db, pg_settings) -> None:  # type: ignore[no-untyped-def]
    world = write_world(app)
    catch_up(projector, app)
    assert contents(admin_db, pg_settings.read_schema, world.b) == ["Kyoto", "Rust", "met Ming"]
    assert contents(admin_db, pg_settings.read_schema, world.a) == ["Taipei", "met Hannah"]
    assert parked_of(admin_db, pg_settings, world.a) == [
        (2, "projection"), (1, "undecodable"), (3, "waiting")], "Acme, the lost card, Globex"
    tracked = {r[2]: r[3] for r in rows(admin_db, pg_settings.read_schema,
                                        "projection_tracking", world.a)}
    assert tracked[world.employer] == 1 and world.gone not in tracked, "not past the parked"
    for tenant, position in world.last.items():  # read-your-writes does not hang
        assert reads.wait_for(tenant, position, timeout=2).fresh

    db = projector_database(admin_db, pg_settings)
    listed = [e for e in parked(db, pg_settings).events if e["tenant_id"] == world.a]
    assert [e["reason"] for e in listed] == ["projection", "undecodable", "waiting"]
    assert listed[0]["error"] == "KeyError" and listed[0]["status"] == "parked"
    status = read_status(db, pg_settings)
    assert {f["notification_id"] for f in status.projections[0].failures} >= {
        e["notification_id"] for e in listed}, "palimpsest status lists them"
    assert 'palimpsest_projection_parked{projection="cards"} ' in parked(db, pg_settings).prometheus()


def test_a_retry_after_the_fix_applies_the_parked_events_exactly_once(
        app, projector, admin_db, pg_settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    handler_bug(monkeypatch)
    world = write_world(app)
    catch_up(projector, app)
    acme = next(f for f in failures(admin_db, pg_settings.read_schema, world.a)
                if f["reason"] == "projection")
    monkeypatch.undo()  # the fix
    (retried,) = retry(projector, app, acme["notification_id"])
    assert (retried.applied, retried.parked) == (2, False), "Acme, then Globex"
    assert contents(admin_db, pg_settings.read_schema, world.a) == [
        "Acme", "Globex", "Taipei", "met Hannah"]
    versions = [r for r in rows(admin_db, pg_settings.read_schema, "card_versions", world.a)
                if r[3] in ("Acme", "Globex")]
    assert sorted(r[3] for r in versions) == ["Acme", "Acme", "Globex"], "applied once"
    assert parked_of(admin_db, pg_settings, world.a) == [(1, "undecodable")]
    with pytest.raises(ParkedEventNotFoundError):
        retry(projector, app, acme["notification_id"])
    assert catch_up(projector, app, after=0) == 0, "the whole log again changes nothing"
    assert parked_of(admin_db, pg_settings, world.a) == [(1, "undecodable")], "still only it"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_rebuild_parks_what_the_incremental_projector_parks(
        app, projector, broken, admin_db, pg_settings, workers) -> None:  # type: ignore[no-untyped-def]
    world = write_world(app)
    catch_up(projector, app)
    report = rebuild(pg_settings, app, into="palimpsest_read_poison", workers=workers)
    assert not report.projected, "nothing the fold could not foresee"
    ours = [p for p in report.parked if p["tenant_id"] == world.a]
    assert [(p["originator_version"], p["reason"]) for p in ours] == [
        (2, "projection"), (1, "undecodable"), (3, "waiting")]
    assert any("parked" in line for line in report.parked_lines())
    assert_rebuilt_equals_live(admin_db, pg_settings, "palimpsest_read_poison", world.a, world.b)


def test_a_skip_applies_the_rest_and_a_rebuild_comes_to_the_same(
        app, projector, broken, admin_db, pg_settings) -> None:  # type: ignore[no-untyped-def]
    world = write_world(app)
    skills = [app.remember(world.a, state("skills", value)) for value in ("COBOL", "Rust", "Go")]
    catch_up(projector, app)
    cobol = next(f for f in failures(admin_db, pg_settings.read_schema, world.a)
                 if f["originator_id"] == skills[0].aggregate_id and f["reason"] == "projection")
    log_position = projector.log_position()
    done = skip(projector, app, cobol["notification_id"], "a bad import", "ops@example")
    assert (done.originator_id, done.applied, done.parked) == (skills[0].aggregate_id, 2, False)
    assert projector.log_position() == log_position, "a decision's tenant '*' moves no position"
    assert {"Rust", "Go"} <= set(contents(admin_db, pg_settings.read_schema, world.a))
    assert "COBOL" not in contents(admin_db, pg_settings.read_schema, world.a)
    (row,) = [f for f in failures(admin_db, pg_settings.read_schema, world.a)
              if f["notification_id"] == cobol["notification_id"]]
    assert (row["status"], row["resolution"], row["resolved_by"]) == (
        "skipped", "a bad import", "ops@example")
    logged = [d for d in decisions(app) if getattr(d, "notification_id", None)
              == cobol["notification_id"]]
    assert [(d.decided_by, d.reason, d.tenant_id) for d in logged] == [
        ("ops@example", "a bad import", "*")], "the decision is an event in the log"
    with pytest.raises(ParkedEventNotFoundError):
        skip(projector, app, cobol["notification_id"], "again", "ops@example")

    # Acme skipped: Globex, which supersedes it, draws an edge to a card never made: refused
    acme = next(f for f in failures(admin_db, pg_settings.read_schema, world.a)
                if f["originator_id"] == world.employer and f["reason"] == "projection")
    done = skip(projector, app, acme["notification_id"], "never worked there", "ops@example")
    assert (done.applied, done.parked) == (0, True)
    assert parked_of(admin_db, pg_settings, world.a)[-1] == (3, "refused")

    report = rebuild(pg_settings, app, into="palimpsest_read_skipped", workers=2)
    assert report.projected, "the refused edge sends the rebuild through the projector"
    assert skills[0].aggregate_id not in {p["originator_id"] for p in report.parked}
    assert_rebuilt_equals_live(admin_db, pg_settings, "palimpsest_read_skipped", world.a, world.b)
    globex = next(f for f in failures(admin_db, pg_settings.read_schema, world.a)
                  if f["reason"] == "refused")
    skip(projector, app, globex["notification_id"], "follows the skipped Acme", "ops@example")
    assert (3, "refused") not in parked_of(admin_db, pg_settings, world.a), "nothing refused left"


def test_an_edge_to_a_parked_card_waits_with_it(  # type: ignore[no-untyped-def]
        app, projector, broken, admin_db, pg_settings, monkeypatch) -> None:
    tenant = new_tenant()
    redis, valkey = write_link_to_broken(app, tenant)
    catch_up(projector, app)
    assert parked_of(admin_db, pg_settings, tenant) == [(1, "projection"), (2, "refused")]
    refused = failures(admin_db, pg_settings.read_schema, tenant)[1]
    assert refused["originator_id"] == valkey and refused["error"].startswith("ForeignKeyViolation")
    report = rebuild(pg_settings, app, into="palimpsest_read_edges", workers=2)
    assert report.projected, "the fold cannot see the refused edge: the projector rebuilt it"
    assert_rebuilt_equals_live(admin_db, pg_settings, "palimpsest_read_edges", tenant)

    monkeypatch.undo()  # the fix: retrying Redis retries Valkey after it
    done = retry(projector, app, failures(admin_db, pg_settings.read_schema, tenant)[0][
        "notification_id"])
    assert [(r.originator_id, r.applied, r.parked) for r in done] == [
        (redis, 1, False), (valkey, 1, False)]
    edges = rows(admin_db, pg_settings.read_schema, "card_relations", tenant)
    assert [(e[1], e[2]) for e in edges] == [(valkey, redis)]


def test_a_nul_in_an_old_event_is_projected_sanitised(  # type: ignore[no-untyped-def]
        app, projector, admin_db, pg_settings) -> None:
    tenant = new_tenant()
    with stored_as(app, with_nul):
        app.remember(tenant, state("address", MARK))
        app.remember(tenant, Remember(kind="event", memory_type="event", content="met Ming",
                                      tags=(MARK,)))
    catch_up(projector, app)
    assert contents(admin_db, pg_settings.read_schema, tenant) == ["A\ufffdB", "met Ming"]
    with admin_db.connect() as conn:
        (tags,) = conn.execute(sql.SQL("SELECT tags FROM {}.cards WHERE tenant_id = %s AND "
                                       "kind = 'event'").format(sql.Identifier(
                                           pg_settings.read_schema)), (tenant,)).fetchone()
    assert [tag.lower() for tag in tags] == ["a\ufffdb"], "its tag too"
    assert failures(admin_db, pg_settings.read_schema, tenant) == [], "nothing parked"
    project_into(pg_settings, app, admin_db, "palimpsest_read_nul",
                 app.recorder.max_notification_id() or 0, None)
    report = rebuild(pg_settings, app, into="palimpsest_read_nul", workers=1)
    assert_rebuilt_equals_live(admin_db, pg_settings, report.schema, tenant)


def test_the_failures_commands(app, projector, admin_db, pg_settings) -> None:  # type: ignore[no-untyped-def]
    import json

    tenant = new_tenant()
    app.remember(tenant, state("address", "Taipei"))
    world_gone = write_world(app).gone
    catch_up(projector, app)
    runner = CliRunner()
    env = {"PALIMPSEST_DATA_DIR": str(pg_settings.data_dir), "PALIMPSEST_AUTO_BOOTSTRAP": "false",
           "PALIMPSEST_PERSISTENCE": "postgres", "PALIMPSEST_REBUILD_WORKERS": "2",
           "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    listed = runner.invoke(cli, ["failures", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    (gone,) = [e for e in json.loads(listed.output)["events"] if e["originator_id"] == str(world_gone)]
    assert gone["reason"] == "undecodable" and gone["status"] == "parked"
    text = runner.invoke(cli, ["failures"], env=env)
    assert f"#{gone['notification_id']} parked" in text.output

    rebuilt = runner.invoke(cli, ["rebuild", "--into", "palimpsest_read_cli_poison"], env=env)
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "parked (palimpsest failures lists them" in rebuilt.output
    assert f"#{gone['notification_id']}" in rebuilt.output

    skipped = runner.invoke(cli, ["failures", "skip", str(gone["notification_id"]), "--reason",
                                  "written by a lost module", "--by", "ops"], env=env)
    assert skipped.exit_code == 0, skipped.output
    with admin_db.connect() as conn:  # handled, as a rebuild's fold counts a skipped event
        tracked = conn.execute(sql.SQL(
            "SELECT version FROM {}.projection_tracking WHERE originator_id = %s").format(
            sql.Identifier(pg_settings.read_schema)), (world_gone,)).fetchall()
    assert tracked == [(1,)], "a skipped undecodable event is past"
    everything = json.loads(runner.invoke(cli, ["failures", "--all", "--json"], env=env).output)
    (row,) = [e for e in everything["events"] if e["notification_id"] == gone["notification_id"]]
    assert (row["status"], row["resolution"], row["resolved_by"]) == (
        "skipped", "written by a lost module", "ops")
    missing = runner.invoke(cli, ["failures", "skip", "999999999", "--reason", "x", "--by", "y"],
                            env=env)
    assert missing.exit_code != 0 and "Traceback" not in missing.output
    assert "no parked event" in str(missing.exception or "") + missing.output
