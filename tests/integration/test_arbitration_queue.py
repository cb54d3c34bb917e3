"""The arbitration queue read model with one case per slot: writes that join a pending case keep
its one row, which shows the latest proposal; the decision lands on that row; a rebuild of the log
builds the same row (the ``ProposalAdded`` projection, in both sinks)."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

from infra.postgres import Database
from infra.settings import Settings
from projections.replay import rebuild
from projections.worker import project_log
from services.command.commands import Arbitrate
from services.factory import create_app
from tests.integration.test_projections import dump
from tests.support import Clock, new_tenant, state

pytestmark = pytest.mark.integration


def queue_rows(admin: Database, schema: str, tenant: str) -> list[dict[str, Any]]:
    with admin.connect() as conn:
        cur = conn.execute(sql.SQL(
            "SELECT case_id, proposed_value, proposed_card_id, reason, decision FROM {}.arbitration_queue "
            "WHERE tenant_id = %s").format(sql.Identifier(schema)), (tenant,))
        names = [c.name for c in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def test_one_row_per_case_showing_the_latest_proposal(pg_settings: Settings, admin_db: Database) -> None:
    clock, tenant = Clock(), new_tenant()
    settings = pg_settings.model_copy(update={"projector_embeddings": False})
    app = create_app(settings, clock=clock)
    try:
        results = []
        for value in ("June 1", "July 1", "July 2", "Aug 1", "Aug 2", "Aug 3"):
            results.append(app.remember(tenant, state("launch_date", value, subject="fibon")))
            clock.advance(days=1)
        case_id, latest = results[3].case_id, results[-1]
        assert {r.case_id for r in results[3:]} == {case_id}
        project_log(settings, app, admin=admin_db)
        [row] = queue_rows(admin_db, settings.read_schema, tenant)
        assert (row["case_id"], row["proposed_value"], row["proposed_card_id"], row["decision"]) == (
            case_id, "Aug 3", latest.card_id, None)
        app.arbitrate(tenant, Arbitrate(case_id=case_id, decision="accept_new", decided_by="henry"))
        project_log(settings, app, admin=admin_db)
        [row] = queue_rows(admin_db, settings.read_schema, tenant)
        assert row["decision"] == "accept_new"
        rebuild(settings, app, into="palimpsest_read_queue", workers=1)
        assert dump(admin_db, "palimpsest_read_queue", "arbitration_queue", tenant) == dump(
            admin_db, settings.read_schema, "arbitration_queue", tenant)
    finally:
        app.close()
