"""One pending arbitration case per slot (RELIABILITY: "one pending arbitration case per slot, not
one per write"), run on every backend through :class:`tests.scenarios.WriteSideScenarios`: a write
queued while a case is pending joins it, and one decision settles every proposal."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.arbitration import ArbitrationCase
from domain.errors import CardNotFoundError, InvalidCommandError, InvalidTransitionError
from domain.slot import Slot
from services.command.commands import Arbitrate
from tests.support import Clock, state, stored_count


def event_names(app, aggregate_id) -> list[str]:  # type: ignore[no-untyped-def]
    return [type(e).__name__ for e in app.events.get(aggregate_id)]


class ArbitrationCaseScenarios:
    def queue(self, app, tenant, clock: Clock, values: list[str]):  # type: ignore[no-untyped-def]
        """A launch date changed twice, then ``values`` written a day apart: each is queued."""
        first = app.remember(tenant, state("launch_date", "June 1", subject="fibon"))
        for value in ("July 1", "July 2"):
            clock.advance(days=1)
            app.remember(tenant, state("launch_date", value, subject="fibon"))
        queued = []
        for value in values:
            clock.advance(days=1)
            queued.append(app.remember(tenant, state("launch_date", value, subject="fibon")))
        return first.aggregate_id, queued

    def decide(self, app, tenant, case_id, decision: str, **extra):  # type: ignore[no-untyped-def]
        return app.arbitrate(tenant, Arbitrate(case_id=case_id, decision=decision, decided_by="henry",
                                               **extra))

    def test_later_queued_writes_join_the_pending_case(self, app, tenant, clock) -> None:
        slot_id, queued = self.queue(app, tenant, clock, ["Aug 1", "Aug 2", "Aug 3"])
        assert {q.outcome for q in queued} == {"queued"}
        case_id = queued[0].case_id
        assert [q.case_id for q in queued] == [case_id] * 3
        slot = app.load(tenant, slot_id, Slot)
        assert list(slot.pending) == [case_id]
        assert [p.card.value for p in slot.pending[case_id]] == ["Aug 1", "Aug 2", "Aug 3"]
        case = app.load(tenant, case_id, ArbitrationCase)
        assert [c.card_id for c in case.proposals] == [q.card_id for q in queued]
        assert event_names(app, case_id) == ["Opened", "ProposalAdded", "ProposalAdded"]
        assert event_names(app, slot_id)[-3:] == ["Contested", "ProposalAdded", "ProposalAdded"]
        assert [c.value for c in slot.current_cards] == ["July 2"]

    def test_accept_new_takes_the_latest_proposal_and_settles_them_all(self, app, tenant,
                                                                       clock) -> None:
        slot_id, queued = self.queue(app, tenant, clock, ["Aug 1", "Aug 2", "Aug 3"])
        clock.advance(hours=1)
        decided = self.decide(app, tenant, queued[0].case_id, "accept_new")
        assert (decided.outcome, decided.card_id) == ("superseded", queued[-1].card_id)
        slot = app.load(tenant, slot_id, Slot)
        assert [c.value for c in slot.current_cards] == ["Aug 3"] and not slot.pending
        assert {c.value for c in slot.cards.values()} == {"June 1", "July 1", "July 2", "Aug 3"}
        with pytest.raises(InvalidTransitionError):
            self.decide(app, tenant, queued[-1].case_id, "keep_old")

    def test_accept_new_takes_the_proposal_it_names(self, app, tenant, clock) -> None:
        slot_id, queued = self.queue(app, tenant, clock, ["Aug 1", "Aug 2", "Aug 3"])
        decided = self.decide(app, tenant, queued[0].case_id, "accept_new", card_id=queued[1].card_id)
        assert decided.card_id == queued[1].card_id
        assert [c.value for c in app.load(tenant, slot_id, Slot).current_cards] == ["Aug 2"]
        assert app.load(tenant, queued[0].case_id, ArbitrationCase).decision.value == "accept_new"

    def test_a_card_that_is_no_proposal_or_a_card_with_keep_old_is_refused(self, app, tenant,
                                                                          clock) -> None:
        slot_id, queued = self.queue(app, tenant, clock, ["Aug 1", "Aug 2"])
        before = stored_count(app)
        current = app.load(tenant, slot_id, Slot).current_cards[0].card_id
        with pytest.raises(CardNotFoundError):
            self.decide(app, tenant, queued[0].case_id, "accept_new", card_id=current)
        with pytest.raises(InvalidCommandError):
            self.decide(app, tenant, queued[0].case_id, "keep_old", card_id=queued[0].card_id)
        assert stored_count(app) == before

    def test_keep_old_rejects_every_proposal(self, app, tenant, clock) -> None:
        slot_id, queued = self.queue(app, tenant, clock, ["Aug 1", "Aug 2", "Aug 3"])
        cards_before = dict(app.load(tenant, slot_id, Slot).cards)
        assert self.decide(app, tenant, queued[0].case_id, "keep_old").outcome == "kept_old"
        slot = app.load(tenant, slot_id, Slot)
        assert slot.cards == cards_before and not slot.pending

    def test_both_valid_gives_each_proposal_its_own_stretch(self, app, tenant, clock) -> None:
        slot_id, queued = self.queue(app, tenant, clock, ["Aug 1", "Aug 2", "Aug 1 "])
        self.decide(app, tenant, queued[0].case_id, "both_valid")
        slot = app.load(tenant, slot_id, Slot)
        timeline = sorted((c.valid_from, c.valid_to, c.value) for c in slot.live_cards)
        assert [v for _, _, v in timeline] == ["June 1", "July 1", "July 2", "Aug 1", "Aug 2"]
        assert all(end == nxt for (_, end, _), (nxt, _, _) in zip(timeline, timeline[1:], strict=False))
        assert [c.value for c in slot.current_cards] == ["Aug 2"]  # "Aug 1 " restated Aug 1

    def test_both_valid_places_backdated_proposals_between_the_values(self, app, tenant,
                                                                      clock) -> None:
        first = app.remember(tenant, state("address", "Taipei",
                                           valid_from=clock.now - timedelta(days=10)))
        osaka = app.remember(tenant, state("address", "Osaka",
                                           valid_from=clock.now - timedelta(days=60)))
        kyoto = app.remember(tenant, state("address", "Kyoto",
                                           valid_from=clock.now - timedelta(days=45)))
        assert kyoto.case_id == osaka.case_id
        self.decide(app, tenant, osaka.case_id, "both_valid")
        slot = app.load(tenant, first.aggregate_id, Slot)
        timeline = sorted((c.valid_from, c.value) for c in slot.live_cards)
        assert [v for _, v in timeline] == ["Osaka", "Kyoto", "Taipei"]
        assert [c.value for c in slot.current_cards] == ["Taipei"]

    def test_after_a_decision_the_next_queued_write_opens_a_new_case(self, app, tenant,
                                                                    clock) -> None:
        slot_id, queued = self.queue(app, tenant, clock, ["Aug 1", "Aug 2"])
        self.decide(app, tenant, queued[0].case_id, "keep_old")
        clock.advance(days=1)
        again = app.remember(tenant, state("launch_date", "Sep 1", subject="fibon"))
        assert again.outcome == "queued" and again.case_id != queued[0].case_id
        assert list(app.load(tenant, slot_id, Slot).pending) == [again.case_id]

    def test_a_joining_write_replayed_by_request_id_answers_the_same_case(self, app, tenant,
                                                                          clock) -> None:
        _, queued = self.queue(app, tenant, clock, ["Aug 1"])
        command = state("launch_date", "Aug 2", subject="fibon", request_id="join-1")
        joined = app.remember(tenant, command)
        count = stored_count(app)
        again = app.remember(tenant, command)
        assert again.replayed and again.case_id == joined.case_id == queued[0].case_id
        assert stored_count(app) == count

    def test_multi_value_accept_new_takes_the_latest_of_each_item(self, app, tenant, clock) -> None:
        skills = app.remember(tenant, state("skills", "Python", item_key="python"))
        app.remember(tenant, state("skills", "Rust", item_key="rust"))
        for value in ("Python 3.11", "Python 3.12"):  # two changes in place
            clock.advance(days=1)
            app.remember(tenant, state("skills", value, item_key="python"))
        proposals = []
        for value, key in (("Python 3.13", "python"), ("Rust 2024", "rust"), ("Python 3.14", "python")):
            clock.advance(days=1)
            proposals.append(app.remember(tenant, state("skills", value, item_key=key)))
        assert [p.outcome for p in proposals] == ["queued"] * 3
        assert len({p.case_id for p in proposals}) == 1
        self.decide(app, tenant, proposals[0].case_id, "accept_new")
        slot = app.load(tenant, skills.aggregate_id, Slot)
        assert sorted(c.value for c in slot.current_cards) == ["Python 3.14", "Rust 2024"]
