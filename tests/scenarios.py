"""Write-side scenarios, run on every backend: each tier subclasses ``WriteSideScenarios`` and
provides a ``make_app(clock)`` fixture. Input hygiene (``tests.scenarios_input``) and one pending
arbitration case per slot (``tests.scenarios_arbitration``) are mixed in."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from domain.errors import (
    ArbitrationCaseNotFoundError,
    CardinalityError,
    CardNotFoundError,
    ContentTooLargeError,
    EmptyContentError,
    FutureTimeError,
    IdempotencyKeyReusedError,
    InvalidKindError,
    InvalidScopeError,
    InvalidTransitionError,
    OccurredAtImmutableError,
    PalimpsestError,
    StaleCardError,
    ValidityOrderError,
)
from domain.slot import Slot
from services.command.commands import (
    Arbitrate,
    CorrectEvent,
    Link,
    Merge,
    Move,
    Remember,
    Rename,
    Revise,
    Verify,
)
from services.command.memory import Palimpsest
from services.query.views import slot_view
from tests.scenarios_arbitration import ArbitrationCaseScenarios
from tests.scenarios_input import InputScenarios
from tests.support import Clock, all_events, new_tenant, state, stored_count

MakeApp = Callable[[Clock], Palimpsest]


class WriteSideScenarios(InputScenarios, ArbitrationCaseScenarios):
    @pytest.fixture
    def clock(self) -> Clock:
        return Clock()

    @pytest.fixture
    def app(self, make_app: MakeApp, clock: Clock) -> Palimpsest:
        return make_app(clock)

    @pytest.fixture
    def tenant(self) -> str:
        return new_tenant()

    def slot(self, app: Palimpsest, tenant: str, slot_id) -> Slot:  # type: ignore[no-untyped-def]
        return app.load(tenant, slot_id, Slot)

    def values(self, app: Palimpsest, tenant: str, slot_id) -> list[str]:  # type: ignore[no-untyped-def]
        return [c.value for c in self.slot(app, tenant, slot_id).current_cards]

    def make_changes(self, app: Palimpsest, tenant: str, clock: Clock, n: int):  # type: ignore[no-untyped-def]
        """A launch date set, then changed ``n`` times, a day apart."""
        first = app.remember(tenant, state("launch_date", "June 1", subject="fibon"))
        for i in range(n):
            clock.advance(days=1)
            app.remember(tenant, state("launch_date", f"July {i + 1}", subject="fibon"))
        clock.advance(days=1)
        return first.aggregate_id

    # ---- append-and-supersede, cardinality ---------------------------------------------

    def test_single_value_supersedes_and_keeps_the_old_card(self, app, tenant, clock) -> None:
        first = app.remember(tenant, state("address", "Taipei"))
        moved_at = clock.advance(days=10)
        second = app.remember(tenant, state("address", "Kyoto"))
        assert (first.outcome, second.outcome) == ("remembered", "superseded")
        slot = self.slot(app, tenant, first.aggregate_id)
        old, new = slot.card(first.card_id), slot.card(second.card_id)
        assert old.valid_to == moved_at and old.retracted_at is None
        assert new.valid_from == moved_at and new.valid_to is None
        assert (new.edge, new.edge_target) == ("supersedes", old.card_id)
        assert [c.value for c in slot.current_cards] == ["Kyoto"]
        assert [c.value for c in slot.valid_at(moved_at - timedelta(days=1))] == ["Taipei"]

    def test_multi_value_accumulates_and_updates_in_place_with_audit(
        self, app, tenant, clock
    ) -> None:
        python = app.remember(tenant, state("skills", "Python"))
        app.remember(tenant, state("skills", "PostgreSQL"))
        clock.advance(days=3)
        updated = app.remember(tenant, state("skills", "Python (expert)", item_key="python"))
        assert updated.outcome == "updated" and updated.card_id == python.card_id
        assert sorted(self.values(app, tenant, python.aggregate_id)) == [
            "PostgreSQL",
            "Python (expert)",
        ]
        audit = [
            e for e in app.events.get(python.aggregate_id) if type(e).__name__ == "ItemRevised"
        ]
        assert [(e.previous_value, e.value) for e in audit] == [("Python", "Python (expert)")]

    def test_repeating_the_current_value_verifies_it(self, app, tenant, clock) -> None:
        first = app.remember(tenant, state("address", "Taipei"))
        verified_at = clock.advance(days=200)
        again = app.remember(tenant, state("address", "  taipei "))
        assert again.outcome == "verified" and again.card_id == first.card_id
        slot = self.slot(app, tenant, first.aggregate_id)
        assert len(slot.cards) == 1 and slot.card(first.card_id).verified_at == verified_at

    def test_declared_cardinality_loses_to_the_table_and_is_recorded(self, app, tenant) -> None:
        first = app.remember(tenant, state("address", "Taipei", cardinality="multi_value"))
        slot = self.slot(app, tenant, first.aggregate_id)
        assert slot.cardinality.value == "single_value"
        assert slot.declared_cardinality == "multi_value"
        assert slot.card(first.card_id).declared_cardinality == "multi_value"

    def test_a_later_declaration_cannot_change_a_slot_and_is_recorded(self, app, tenant) -> None:
        app.remember(tenant, state("favourite_tea", "Oolong", cardinality="single_value"))
        other = app.remember(tenant, state("favourite_tea", "Sencha", cardinality="multi_value"))
        slot = self.slot(app, tenant, other.aggregate_id)
        assert slot.cardinality.value == "single_value" and other.outcome == "superseded"
        assert slot.card(other.card_id).declared_cardinality == "multi_value"

    def test_caller_declares_cardinality_of_unknown_labels(self, app, tenant) -> None:
        app.remember(tenant, state("favourite_teas", "Oolong", cardinality="multi_value"))
        tea = app.remember(tenant, state("favourite_teas", "Sencha", cardinality="multi_value"))
        assert sorted(self.values(app, tenant, tea.aggregate_id)) == ["Oolong", "Sencha"]

    def test_a_bounded_past_value_splits_the_current_one(self, app, tenant, clock) -> None:
        first = app.remember(
            tenant, state("employer", "Acme", valid_from=clock.now - timedelta(days=20))
        )
        app.remember(
            tenant,
            state(
                "employer",
                "Globex",
                valid_from=clock.now - timedelta(days=15),
                valid_to=clock.now - timedelta(days=10),
            ),
        )
        slot = self.slot(app, tenant, first.aggregate_id)
        timeline = sorted((c.valid_from, c.value) for c in slot.live_cards)
        assert [v for _, v in timeline] == ["Acme", "Globex", "Acme"]
        assert [c.value for c in slot.current_cards] == ["Acme"]

    # ---- three-layer arbitration ---------------------------------------------------------

    def test_same_turn_self_correction_overwrites(self, app, tenant, clock) -> None:
        app.remember(tenant, state("address", "Tainan"))
        clock.advance(days=5)
        typo = app.remember(tenant, state("address", "Taipei", session_id="s1", turn_id="t3"))
        clock.advance(seconds=20)
        fixed = app.remember(tenant, state("address", "Kaohsiung", session_id="s1", turn_id="t3"))
        assert fixed.outcome == "overwritten"
        slot = self.slot(app, tenant, typo.aggregate_id)
        assert slot.card(typo.card_id).retracted_at == clock.now
        assert slot.card(fixed.card_id).valid_from == slot.card(typo.card_id).valid_from
        assert [c.value for c in slot.current_cards] == ["Kaohsiung"]

    def test_the_second_change_in_30_days_applies_automatically(self, app, tenant, clock) -> None:
        slot_id = self.make_changes(app, tenant, clock, 1)
        result = app.remember(tenant, state("launch_date", "August 1", subject="fibon"))
        assert result.outcome == "superseded"
        assert self.values(app, tenant, slot_id) == ["August 1"]

    def test_the_third_change_in_30_days_is_queued(self, app, tenant, clock) -> None:
        slot_id = self.make_changes(app, tenant, clock, 2)
        result = app.remember(tenant, state("launch_date", "August 1", subject="fibon"))
        assert result.outcome == "queued" and result.case_id is not None
        assert "high frequency: 3 changes" in (result.reason or "")
        assert self.values(app, tenant, slot_id) == ["July 2"]
        assert list(self.slot(app, tenant, slot_id).pending) == [result.case_id]

    def test_changes_on_days_0_5_9_and_20_queue_the_third(self, app, tenant, clock) -> None:
        """The value set on day 0 is no change; days 5 and 9 are; day 20 is the third in 30 days."""
        outcomes, start = [], clock.now
        for day, value in ((0, "Taipei"), (5, "Kyoto"), (9, "Osaka"), (20, "Tainan")):
            clock.now = start + timedelta(days=day)
            outcomes.append(app.remember(tenant, state("address", value)).outcome)
        assert outcomes == ["remembered", "superseded", "superseded", "queued"]

    def test_changes_older_than_30_days_do_not_count(self, app, tenant, clock) -> None:
        self.make_changes(app, tenant, clock, 2)
        clock.advance(days=30)
        assert (
            app.remember(tenant, state("launch_date", "Aug 1", subject="fibon")).outcome
            == "superseded"
        )

    @pytest.mark.parametrize(("days_back", "outcome"), [(29, "superseded"), (31, "queued")])
    def test_backdate_boundary(self, app, tenant, clock, days_back, outcome) -> None:
        app.remember(tenant, state("address", "Taipei", valid_from=clock.now - timedelta(days=400)))
        clock.advance(days=1)
        result = app.remember(
            tenant, state("address", "Kyoto", valid_from=clock.now - timedelta(days=days_back))
        )
        assert result.outcome == outcome

    def test_a_backfill_is_judged_as_of_when_each_change_was_stated(self, app, tenant, clock) -> None:
        """Values stated on days 0, 40, 80, 95 and 99 of last year, all written today, are judged
        as of their statements: none rewrites history, and day 99's is the third change in the
        30 days before it (80, 95, 99)."""
        start, outcomes = clock.now - timedelta(days=400), []
        for day, value in ((0, "Taipei"), (40, "Kyoto"), (80, "Osaka"), (95, "Tainan")):
            said = start + timedelta(days=day)
            outcomes.append(app.remember(tenant, state("address", value, valid_from=said,
                                                       stated_at=said)).outcome)
        assert outcomes == ["remembered", "superseded", "superseded", "superseded"]
        late = start + timedelta(days=99)
        result = app.remember(tenant, state("address", "Tainan!", valid_from=late, stated_at=late))
        assert result.outcome == "queued" and "high frequency: 3 changes" in (result.reason or "")

    def test_a_backfilled_statement_that_rewrites_its_own_past_is_queued(self, app, tenant, clock) -> None:
        said = clock.now - timedelta(days=200)
        app.remember(tenant, state("address", "Taipei", valid_from=said - timedelta(days=300),
                                   stated_at=said - timedelta(days=300)))
        result = app.remember(tenant, state("address", "Kyoto", valid_from=said - timedelta(days=45),
                                            stated_at=said))
        assert result.outcome == "queued" and "large span: rewrites history 45 days" in (result.reason or "")

    def test_a_statement_time_in_the_future_is_refused(self, app, tenant, clock) -> None:
        with pytest.raises(FutureTimeError, match="stated_at"):
            app.remember(tenant, state("address", "Taipei", stated_at=clock.now + timedelta(days=1)))

    def test_a_far_past_fact_in_an_empty_slot_is_no_conflict(self, app, tenant, clock) -> None:
        result = app.remember(
            tenant, state("school", "NTU", valid_from=clock.now - timedelta(days=4000))
        )
        assert result.outcome == "remembered"

    def test_accept_new(self, app, tenant, clock) -> None:
        slot_id = self.make_changes(app, tenant, clock, 2)
        queued = app.remember(tenant, state("launch_date", "August 1", subject="fibon"))
        clock.advance(days=1)
        decided = app.arbitrate(
            tenant, Arbitrate(case_id=queued.case_id, decision="accept_new", decided_by="henry")
        )
        assert decided.outcome == "superseded"
        slot = self.slot(app, tenant, slot_id)
        assert [c.value for c in slot.current_cards] == ["August 1"] and not slot.pending
        with pytest.raises(InvalidTransitionError):
            app.arbitrate(
                tenant, Arbitrate(case_id=queued.case_id, decision="keep_old", decided_by="henry")
            )

    def test_keep_old(self, app, tenant, clock) -> None:
        slot_id = self.make_changes(app, tenant, clock, 2)
        queued = app.remember(tenant, state("launch_date", "August 1", subject="fibon"))
        cards_before = dict(self.slot(app, tenant, slot_id).cards)
        decided = app.arbitrate(
            tenant,
            Arbitrate(
                case_id=queued.case_id, decision="keep_old", decided_by="henry", note="still July"
            ),
        )
        assert decided.outcome == "kept_old"
        slot = self.slot(app, tenant, slot_id)
        assert slot.cards == cards_before and not slot.pending

    def test_both_valid_places_each_value_on_its_own_stretch(self, app, tenant, clock) -> None:
        first = app.remember(
            tenant, state("address", "Taipei", valid_from=clock.now - timedelta(days=10))
        )
        queued = app.remember(
            tenant, state("address", "Osaka", valid_from=clock.now - timedelta(days=60))
        )
        assert queued.outcome == "queued"
        app.arbitrate(
            tenant, Arbitrate(case_id=queued.case_id, decision="both_valid", decided_by="u")
        )
        slot = self.slot(app, tenant, first.aggregate_id)
        assert sorted((c.valid_from, c.value) for c in slot.live_cards)[0][1] == "Osaka"
        assert [c.value for c in slot.current_cards] == ["Taipei"]
        osaka = slot.card(queued.card_id)
        assert osaka.valid_to == slot.card(first.card_id).valid_from

    def test_unknown_arbitration_and_decision(self, app, tenant, clock) -> None:
        from uuid import uuid4

        with pytest.raises(ArbitrationCaseNotFoundError):
            app.arbitrate(tenant, Arbitrate(case_id=uuid4(), decision="keep_old", decided_by="u"))
        with pytest.raises(InvalidKindError):
            app.arbitrate(
                tenant, Arbitrate(case_id=uuid4(), decision="flip_a_coin", decided_by="u")
            )

    # ---- revise --------------------------------------------------------------------------

    def test_revise_with_typed_edges(self, app, tenant, clock) -> None:
        first = app.remember(tenant, state("address", "Taipei"))
        clock.advance(days=2)
        revised = app.revise(
            tenant,
            first.aggregate_id,
            Revise(card_id=first.card_id, content="Taipei, Da'an district", edge="updates"),
        )
        assert revised.outcome == "superseded"
        card = self.slot(app, tenant, first.aggregate_id).card(revised.card_id)
        assert (card.edge, card.edge_target) == ("updates", first.card_id)
        with pytest.raises(CardinalityError):
            app.revise(
                tenant,
                first.aggregate_id,
                Revise(card_id=revised.card_id, content="also Kyoto", edge="extends"),
            )
        with pytest.raises(StaleCardError):
            app.revise(tenant, first.aggregate_id, Revise(card_id=first.card_id, content="Tainan"))

    def test_revise_a_multi_value_item_extends_it(self, app, tenant) -> None:
        first = app.remember(tenant, state("skills", "SQL"))
        extended = app.revise(
            tenant,
            first.aggregate_id,
            Revise(card_id=first.card_id, content="SQL window functions", edge="extends"),
        )
        assert extended.outcome == "remembered"
        assert sorted(self.values(app, tenant, first.aggregate_id)) == [
            "SQL",
            "SQL window functions",
        ]

    # ---- refused commands store nothing --------------------------------------------------

    @pytest.mark.parametrize(
        ("command", "error"),
        [
            (Remember(kind="memoir", memory_type="fact", content="x"), InvalidKindError),
            (Remember(kind="event", memory_type="preference", content="x"), InvalidKindError),
            (
                Remember(
                    kind="state", memory_type="fact", subject="u", label="address", content="  "
                ),
                EmptyContentError,
            ),
            (
                Remember(
                    kind="state",
                    memory_type="fact",
                    subject="u",
                    label="address",
                    content="x" * 8001,
                ),
                ContentTooLargeError,
            ),
            (Remember(kind="state", memory_type="fact", content="no slot"), InvalidKindError),
            (
                Remember(
                    kind="state",
                    memory_type="fact",
                    subject="u",
                    label="address",
                    content="x",
                    scope="project",
                ),
                InvalidScopeError,
            ),
            (
                Remember(
                    kind="state",
                    memory_type="fact",
                    subject="u",
                    label="address",
                    content="x",
                    perspective="wife",
                ),
                InvalidScopeError,
            ),
            (
                Remember(kind="state", memory_type="commitment", content="call mom"),
                InvalidKindError,
            ),
            (
                Remember(kind="state", memory_type="fact", subject="u", label="address",
                         content="x", source="rumour"),
                InvalidKindError,
            ),
            (
                Remember(kind="state", memory_type="fact", subject="u", label="address",
                         content="x", cardinality="few"),
                InvalidKindError,
            ),
        ],
    )
    def test_invalid_commands_store_nothing(self, app, tenant, command, error) -> None:
        before = stored_count(app)
        with pytest.raises(error):
            app.remember(tenant, command)
        assert stored_count(app) == before

    def test_invalid_times_store_nothing(self, app, tenant, clock) -> None:
        first = app.remember(tenant, state("address", "Taipei"))
        before = stored_count(app)
        with pytest.raises(ValidityOrderError):
            app.remember(
                tenant,
                state(
                    "address", "Kyoto", valid_from=clock.now, valid_to=clock.now - timedelta(days=1)
                ),
            )
        with pytest.raises(FutureTimeError):
            app.remember(
                tenant, state("address", "Kyoto", valid_from=clock.now + timedelta(hours=1))
            )
        with pytest.raises(FutureTimeError):
            app.remember(
                tenant,
                Remember(
                    kind="event",
                    memory_type="event",
                    content="trip",
                    occurred_at=clock.now + timedelta(days=2),
                ),
            )
        assert stored_count(app) == before
        assert self.values(app, tenant, first.aggregate_id) == ["Taipei"]

    # ---- event cards ---------------------------------------------------------------------

    def test_event_description_is_corrected_with_audit_and_time_never_moves(
        self, app, tenant, clock
    ) -> None:
        when = clock.now - timedelta(days=3)
        recorded = app.remember(
            tenant,
            Remember(kind="event", memory_type="event", content="Kickof meeting", occurred_at=when),
        )
        app.correct(
            tenant,
            CorrectEvent(card_id=recorded.card_id, description="Kickoff meeting", reason="typo"),
        )
        before = stored_count(app)
        with pytest.raises(OccurredAtImmutableError):
            app.correct(
                tenant,
                CorrectEvent(
                    card_id=recorded.card_id,
                    description="Kickoff",
                    reason="x",
                    occurred_at=when + timedelta(days=1),
                ),
            )
        assert stored_count(app) == before
        events = [type(e).__name__ for e in app.events.get(recorded.card_id)]
        assert events == ["Recorded", "Corrected"]
        corrected = list(app.events.get(recorded.card_id))[1]
        assert (corrected.previous_description, corrected.description) == (
            "Kickof meeting",
            "Kickoff meeting",
        )

    # ---- knowledge cards -----------------------------------------------------------------

    def test_knowledge_rename_merge_link(self, app, tenant) -> None:
        meeting = app.remember(
            tenant, Remember(kind="event", memory_type="event", content="auth review")
        )
        jwt = app.remember(
            tenant,
            Remember(
                kind="knowledge",
                memory_type="pattern",
                title="JWT auth",
                content="stateless tokens",
                tags=("JWT", "後端"),
                links=(meeting.card_id,),
            ),
        )
        dup = app.remember(
            tenant,
            Remember(
                kind="knowledge",
                memory_type="note",
                title="json web tokens",
                content="same idea",
                tags=("json web token", "auth"),
            ),
        )
        app.rename(tenant, Rename(card_id=jwt.card_id, title="JWT stateless auth"))
        app.merge(tenant, Merge(card_id=dup.card_id, into=jwt.card_id))
        app.link(tenant, Link(card_id=jwt.card_id, edge="related_to", target_id=meeting.card_id))
        from domain.knowledge import KnowledgeCard

        survivor = app.load(tenant, jwt.card_id, KnowledgeCard)
        merged = app.load(tenant, dup.card_id, KnowledgeCard)
        assert survivor.title == "JWT stateless auth"
        assert merged.merged_into == survivor.id and survivor.absorbed == [merged.id]
        assert list(survivor.tags) == ["json web token", "后端", "auth"]
        assert set(survivor.links) == {
            ("evidenced_by", meeting.card_id),
            ("related_to", meeting.card_id),
        }
        with pytest.raises(InvalidTransitionError):
            app.rename(tenant, Rename(card_id=dup.card_id, title="zombie"))

    # ---- commitments and blockers --------------------------------------------------------

    def test_commitment_lifecycle(self, app, tenant, clock) -> None:
        due = clock.now + timedelta(days=7)
        promise = app.remember(
            tenant,
            Remember(
                kind="state",
                memory_type="commitment",
                content="send the doc",
                owner="henry",
                due_at=due,
            ),
        )
        assert app.move(tenant, Move(card_id=promise.card_id, to="wait")).outcome == "waiting"
        with pytest.raises(InvalidTransitionError):
            app.move(tenant, Move(card_id=promise.card_id, to="expire"))  # not yet due
        clock.advance(days=8)
        assert app.move(tenant, Move(card_id=promise.card_id, to="expire")).outcome == "expired"
        with pytest.raises(InvalidTransitionError):
            app.move(tenant, Move(card_id=promise.card_id, to="resolve"))
        other = app.remember(
            tenant,
            Remember(kind="state", memory_type="commitment", content="book hotel", owner="henry"),
        )
        assert app.move(tenant, Move(card_id=other.card_id, to="resolve")).outcome == "resolved"
        with pytest.raises(InvalidTransitionError):
            app.move(tenant, Move(card_id=other.card_id, to="wait"))

    def test_blocker_lifecycle(self, app, tenant) -> None:
        blocker = app.remember(
            tenant, Remember(kind="state", memory_type="blocker", content="legal")
        )
        assert app.move(tenant, Move(card_id=blocker.card_id, to="archive")).outcome == "archived"
        with pytest.raises(InvalidTransitionError):
            app.move(tenant, Move(card_id=blocker.card_id, to="archive"))

    def test_verify_resets_the_aging_clock(self, app, tenant, clock) -> None:
        first = app.remember(tenant, state("browser", "Firefox"))
        at = clock.advance(days=181)
        app.verify(tenant, first.aggregate_id, Verify())
        assert self.slot(app, tenant, first.aggregate_id).card(first.card_id).verified_at == at

    # ---- idempotency and tenancy ---------------------------------------------------------

    def test_same_request_id_stores_once_and_answers_the_same(self, app, tenant, clock) -> None:
        command = state("address", "Taipei", request_id="req-1")
        first = app.remember(tenant, command)
        count = stored_count(app)
        clock.advance(minutes=5)
        again = app.remember(tenant, command)
        assert stored_count(app) == count
        assert again.replayed and again.model_dump(
            exclude={"replayed", "position"}
        ) == first.model_dump(exclude={"replayed", "position"})
        with pytest.raises(IdempotencyKeyReusedError):
            app.remember(tenant, state("address", "Kyoto", request_id="req-1"))
        other_tenant = new_tenant()
        assert not app.remember(other_tenant, command).replayed

    def test_another_tenants_card_is_not_found(self, app, tenant) -> None:
        mine = app.remember(tenant, Remember(kind="event", memory_type="event", content="secret"))
        slot = app.remember(tenant, state("address", "Taipei"))
        intruder = new_tenant()
        before = stored_count(app)
        with pytest.raises(CardNotFoundError):
            app.correct(intruder, CorrectEvent(card_id=mine.card_id, description="x", reason="y"))
        with pytest.raises(CardNotFoundError):
            app.verify(intruder, slot.aggregate_id, Verify())
        with pytest.raises(CardNotFoundError):
            app.remember(
                intruder,
                Remember(
                    kind="event", memory_type="event", content="x", links=(slot.aggregate_id,)
                ),
            )
        assert stored_count(app) == before
        theirs = app.remember(intruder, state("address", "Kyoto"))
        assert theirs.aggregate_id != slot.aggregate_id
        assert self.values(app, tenant, slot.aggregate_id) == ["Taipei"]

    def test_every_stored_event_carries_its_tenant(self, app, tenant, clock) -> None:
        first = app.remember(tenant, state("address", "Taipei"))
        clock.advance(days=1)
        app.remember(tenant, state("address", "Kyoto"))
        app.remember(
            tenant, Remember(kind="knowledge", memory_type="note", content="n", tags=("a",))
        )
        app.remember(
            tenant,
            Remember(
                kind="state", memory_type="commitment", content="c", owner="o", request_id="r-9"
            ),
        )
        mine = [e for e in all_events(app) if getattr(e, "tenant_id", None) == tenant]
        assert len(mine) >= 6
        assert all(e.tenant_id == tenant for e in app.events.get(first.aggregate_id))

    def test_domain_errors_share_one_base(self) -> None:
        assert issubclass(StaleCardError, PalimpsestError)

    def test_slot_view_shows_both_timelines(self, app, tenant, clock) -> None:
        first = app.remember(tenant, state("address", "Taipei"))
        clock.advance(days=3)
        app.remember(tenant, state("address", "Kyoto"))
        view = slot_view(app, tenant, first.aggregate_id)
        assert [c.value for c in view.current] == ["Kyoto"]
        assert [(c.value, c.valid_to is None) for c in view.history] == [
            ("Taipei", False),
            ("Kyoto", True),
        ]
        assert [a.event for a in view.audit] == ["Opened", "Remembered", "Superseded"]
