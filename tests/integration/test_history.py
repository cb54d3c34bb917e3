"""A card's history when two of its events share one instant: the version they replaced was known
for no time, and history still reads (both timelines, no gap)."""

from __future__ import annotations

import pytest

from projections.replay import catch_up
from services.command.commands import Verify
from services.factory import create_queries
from tests.support import new_tenant, state

pytestmark = pytest.mark.integration


def test_a_version_replaced_at_the_instant_it_was_recorded(app, projector, pg_settings) -> None:  # type: ignore[no-untyped-def]
    tenant = new_tenant()
    written = app.remember(tenant, state("address", "Taipei"))
    app.verify(tenant, written.aggregate_id, Verify(card_id=written.card_id))  # the same clock
    catch_up(projector, app)
    queries = create_queries(pg_settings)
    try:
        (card,) = queries.history(tenant, str(written.card_id))
    finally:
        queries.close()
    first, second = card.versions
    assert first.known_from == first.known_to == second.known_from == app.test_clock.now
    assert second.known_to is None and second.verified_at == app.test_clock.now
