"""A Hypothesis state machine over the whole write-to-read path on the embedded PostgreSQL:
remember / revise-by-arbitration / verify / crash mid-projection / project / replay. After every
projection the read models' current values equal the aggregates' own, and a replay of the log
equals the incrementally built read models row for row."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from domain.slot import Slot
from projections.projector import ProjectionError
from projections.replay import catch_up, make_projector, rebuild
from services.commands import Arbitrate, Verify
from services.factory import create_app
from services.readmodels import ReadModels
from tests.integration.test_projections import COMPARED, dump
from tests.support import Clock, new_tenant, state

pytestmark = pytest.mark.integration

LABELS = ("address", "skills", "job_title")
VALUES = ("Taipei", "Kyoto", "Kaohsiung", "Python", "Rust")


@pytest.fixture
def machine_env(pg_settings, admin_db, runtime_db):  # type: ignore[no-untyped-def]
    SystemMachine.env = (pg_settings, admin_db, runtime_db)
    yield
    SystemMachine.env = None


class SystemMachine(RuleBasedStateMachine):
    env: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.settings, self.admin, runtime = self.env
        self.clock = Clock()
        self.app = create_app(self.settings, clock=self.clock)
        self.projector = make_projector(self.settings, self.app, admin=self.admin)
        self.reads = ReadModels(runtime, self.settings.read_schema, pool_size=1)
        self.tenant = new_tenant()
        self.slots: set[Any] = set()
        self.cases: list[Any] = []
        self.projected = False

    def teardown(self) -> None:
        self.reads.close()
        self.projector.close()
        self.app.close()

    @rule(label=st.sampled_from(LABELS), value=st.sampled_from(VALUES),
          back_days=st.integers(min_value=0, max_value=45), same_turn=st.booleans())
    def remember(self, label: str, value: str, back_days: int, same_turn: bool) -> None:
        turn = {"session_id": "s", "turn_id": "t"} if same_turn else {}
        result = self.app.remember(self.tenant, state(
            label, value, valid_from=self.clock.now - timedelta(days=back_days), **turn))
        self.slots.add(result.aggregate_id)
        if result.case_id:
            self.cases.append(result.case_id)
        self.projected = False

    @rule(days=st.integers(min_value=0, max_value=20))
    def time_passes(self, days: int) -> None:
        self.clock.advance(days=days, seconds=1)

    @precondition(lambda self: bool(self.cases))
    @rule(decision=st.sampled_from(["keep_old", "accept_new", "both_valid"]))
    def arbitrate(self, decision: str) -> None:
        case_id = self.cases.pop(0)
        self.app.arbitrate(self.tenant, Arbitrate(case_id=case_id, decision=decision,
                                                  decided_by="tester"))
        self.projected = False

    @precondition(lambda self: bool(self.slots))
    @rule(data=st.data())
    def verify(self, data: st.DataObject) -> None:
        slot_id = data.draw(st.sampled_from(sorted(self.slots)))
        slot = self.app.load(self.tenant, slot_id, Slot)
        if slot.current_cards:
            card = data.draw(st.sampled_from(slot.current_cards))
            self.app.verify(self.tenant, slot_id, Verify(card_id=card.card_id))
            self.projected = False

    @rule()
    def crash_mid_projection(self) -> None:
        real = self.projector.sink.apply_all
        calls = {"n": 0}

        def crash_on_second(cur: Any, ops: Any) -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                raise psycopg.OperationalError("connection lost")
            real(cur, ops)

        self.projector.sink.apply_all = crash_on_second  # type: ignore[method-assign]
        try:
            catch_up(self.projector, self.app)
        except ProjectionError:
            pass
        finally:
            self.projector.sink.apply_all = real  # type: ignore[method-assign]

    @rule()
    def project(self) -> None:
        catch_up(self.projector, self.app)
        self.projected = True

    @precondition(lambda self: self.projected)
    @invariant()
    def read_models_agree_with_the_aggregates(self) -> None:
        current = {(c.aggregate_id, c.content) for c in self.reads.current(self.tenant)}
        expected = {(slot_id, card.value) for slot_id in self.slots
                    for card in self.app.load(self.tenant, slot_id, Slot).current_cards}
        assert current == expected

    @precondition(lambda self: self.projected)
    @rule()
    def replay_equals_incremental(self) -> None:
        rebuild(self.settings, self.app, into="palimpsest_read_machine")
        for table in COMPARED:
            live = dump(self.admin, self.settings.read_schema, table, self.tenant)
            rebuilt = dump(self.admin, "palimpsest_read_machine", table, self.tenant)
            assert live == rebuilt, table


def test_whole_system_state_machine(machine_env) -> None:  # type: ignore[no-untyped-def]
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(SystemMachine, settings=settings(
        max_examples=12, stateful_step_count=20, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]))
