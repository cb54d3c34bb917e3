"""The pure rules, without any store."""

import re
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from domain.cards import StateCard
from domain.errors import (
    CardNotFoundError,
    FutureTimeError,
    InvalidCommandError,
    InvalidKindError,
    InvalidScopeError,
    InvalidTenantError,
    InvalidTextError,
    TooManyTagsError,
    ValidityOrderError,
)
from domain.policy import Policy
from domain.rules.arbitration import Decision, Layer, accepted, is_same_turn, judge, recent_changes
from domain.rules.cardinality import decide_cardinality
from domain.rules.tags import normalise_tag, normalise_tags
from domain.rules.timeline import Span, overlapping, place
from domain.rules.validation import check_fields, check_validity
from domain.values import Cardinality, Provenance, Scope, check_tenant, parse_kind

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)
POLICY = Policy()


def days(n: float) -> timedelta:
    return timedelta(days=n)


class TestCardinality:
    def test_table_decides_known_labels(self) -> None:
        assert decide_cardinality("Job Title", None).cardinality is Cardinality.SINGLE
        assert decide_cardinality("skills", None).cardinality is Cardinality.MULTI

    def test_table_wins_and_the_disagreement_shows(self) -> None:
        decision = decide_cardinality("address", "multi_value")
        assert decision.cardinality is Cardinality.SINGLE
        assert decision.disagreed

    def test_caller_decides_unknown_labels_and_single_is_the_default(self) -> None:
        assert decide_cardinality("favourite_teas", "multi_value").cardinality is Cardinality.MULTI
        assert not decide_cardinality("favourite_teas", "multi_value").disagreed
        assert decide_cardinality("favourite_tea", None).cardinality is Cardinality.SINGLE


class TestTags:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("JWT", "json web token"),
            (" #Python ", "python"),
            ("資料庫", "资料库"),
            ("数据库", "资料库"),
            ("K8s", "kubernetes"),
            ("ＡＢＣ", "abc"),
        ],
    )
    def test_normalise(self, raw: str, expected: str) -> None:
        assert normalise_tag(raw) == expected

    def test_duplicates_fold_together_in_order(self) -> None:
        assert normalise_tags(["JWT", "json web token", "後端", "后端"], POLICY) == (
            "json web token",
            "后端",
        )

    def test_too_many_or_too_long_is_refused(self) -> None:
        with pytest.raises(TooManyTagsError):
            normalise_tags([f"t{i}" for i in range(POLICY.max_tags + 1)], POLICY)
        with pytest.raises(TooManyTagsError):
            normalise_tags(["x" * (POLICY.max_tag_chars + 1)], POLICY)


class TestTimeline:
    a, b = uuid4(), uuid4()

    def test_open_card_after_current_closes_it(self) -> None:
        placement = place([Span(self.a, NOW - days(10), None)], NOW, None)
        assert placement.closed == {self.a: NOW}
        assert placement.retracted == () and placement.continued == ()

    def test_card_starting_inside_the_new_stretch_is_retracted(self) -> None:
        spans = [Span(self.a, NOW - days(20), NOW - days(5)), Span(self.b, NOW - days(5), None)]
        placement = place(spans, NOW - days(10), None)
        assert placement.closed == {self.a: NOW - days(10)}
        assert placement.retracted == (self.b,)

    def test_bounded_card_splits_what_it_lands_in(self) -> None:
        placement = place([Span(self.a, NOW - days(30), None)], NOW - days(20), NOW - days(10))
        assert placement.closed == {self.a: NOW - days(20)}
        assert [(c.source_id, c.valid_from, c.valid_to) for c in placement.continued] == [
            (self.a, NOW - days(10), None)
        ]

    def test_disjoint_cards_are_untouched(self) -> None:
        placement = place([Span(self.a, NOW - days(30), NOW - days(20))], NOW - days(20), None)
        assert placement.touched == ()

    def test_overlap_detection(self) -> None:
        assert overlapping([Span(self.a, NOW, None), Span(self.b, NOW + days(1), None)])
        assert not overlapping(
            [Span(self.a, NOW, NOW + days(1)), Span(self.b, NOW + days(1), None)]
        )


class TestArbitrationLayers:
    def verdict(self, changes: int = 0, backdate: float = 0, same_turn: bool = False) -> Layer:
        return judge(
            same_turn=same_turn,
            changes=changes,
            valid_from=NOW - days(backdate),
            now=NOW,
            policy=POLICY,
        ).layer

    def test_the_incoming_change_counts_the_third_in_thirty_days_is_queued(self) -> None:
        assert self.verdict(changes=1) is Layer.AUTOMATIC  # this write is the second change
        assert self.verdict(changes=2) is Layer.QUEUED  # this write is the third

    def test_a_29_day_backdate_is_automatic_31_is_queued(self) -> None:
        assert self.verdict(backdate=29) is Layer.AUTOMATIC
        assert self.verdict(backdate=31) is Layer.QUEUED

    def test_same_turn_wins_over_everything(self) -> None:
        assert self.verdict(changes=9, backdate=90, same_turn=True) is Layer.SAME_TURN

    def test_recent_changes_counts_the_trailing_window_only(self) -> None:
        times = [NOW - days(31), NOW - days(29), NOW - days(1), NOW]
        assert recent_changes(times, NOW, POLICY) == 3

    def test_same_turn_needs_the_same_session_and_turn(self) -> None:
        first = Provenance(session_id="s", turn_id="t1")
        assert is_same_turn(first, NOW, Provenance(session_id="s", turn_id="t1"), NOW, POLICY)
        assert not is_same_turn(first, NOW, Provenance(session_id="s", turn_id="t2"), NOW, POLICY)
        assert not is_same_turn(first, NOW, Provenance(session_id="x", turn_id="t1"), NOW, POLICY)
        no_turn = Provenance(session_id="s")
        assert is_same_turn(no_turn, NOW, no_turn, NOW + timedelta(seconds=60), POLICY)
        assert not is_same_turn(no_turn, NOW, no_turn, NOW + timedelta(minutes=10), POLICY)
        assert not is_same_turn(Provenance(), NOW, Provenance(), NOW, POLICY)


class TestValidation:
    def test_valid_to_before_valid_from(self) -> None:
        with pytest.raises(ValidityOrderError):
            check_validity(NOW, NOW - days(1), NOW, POLICY)

    def test_future_beyond_the_skew_is_refused_within_it_accepted(self) -> None:
        check_validity(NOW + timedelta(minutes=4), None, NOW, POLICY)
        with pytest.raises(FutureTimeError):
            check_validity(NOW + timedelta(minutes=6), None, NOW, POLICY)

    def test_far_past_is_fine(self) -> None:
        check_validity(NOW - days(3650), None, NOW, POLICY)

    def test_kinds_types_scopes_tenants(self) -> None:
        with pytest.raises(InvalidKindError):
            parse_kind("memoir", "fact")
        with pytest.raises(InvalidKindError):
            parse_kind("event", "preference")
        with pytest.raises(InvalidScopeError):
            Scope.parse("project")
        with pytest.raises(InvalidScopeError):
            Scope.parse("personal", project_id="p")
        with pytest.raises(InvalidTenantError):
            check_tenant("a b; drop table")
        with pytest.raises(InvalidKindError):
            Provenance(source="agent_inferred")  # type: ignore[arg-type]
        with pytest.raises(InvalidKindError):
            Provenance(source="agent_inferred", inference_confidence=1.5)  # type: ignore[arg-type]


class TestTextHygiene:
    @pytest.mark.parametrize("text", ["plain", "two\nlines\tand a tab", "windows\r\nline end",
                                      "高雄 👩\u200d💻", "quote \" and / slash", ""])
    def test_text_with_newlines_tabs_and_any_printable_character_passes(self, text: str) -> None:
        check_fields({"content": text, "tags": ("ok",), "links": (uuid4(),), "at": NOW})

    @pytest.mark.parametrize(("text", "what"), [
        ("A\x00B", "NUL byte"), ("\ud800", "lone surrogate U+D800"), ("x\udfff", "U+DFFF"),
        ("\x07", "U+0007"), ("a\rb", "U+000D"), ("end\r", "U+000D"), ("\x7f", "U+007F"),
        ("\x85", "U+0085"), ("\x0b", "U+000B"),
    ])
    def test_nul_surrogates_and_control_characters_are_refused(self, text: str, what: str) -> None:
        with pytest.raises(InvalidTextError, match=re.escape(what)) as raised:
            check_fields({"content": text})
        assert raised.value.field == "content" and isinstance(raised.value, InvalidCommandError)

    def test_nested_texts_are_named_by_their_path(self) -> None:
        for fields, path in (({"tags": ("a", "b\x00")}, "tags[1]"),
                             ({"group_ids": ["g", "\x1b"]}, "group_ids[1]"),
                             ({"meta": {"k": ("ok", "\x00")}}, "meta.k[1]")):
            with pytest.raises(InvalidTextError) as raised:
                check_fields(fields)
            assert raised.value.field == path

    @pytest.mark.parametrize(("fields", "path"), [
        ({"subject": "user/anna"}, "subject"), ({"label": "home/city"}, "label"),
        ({"label": "  "}, "label"), ({"tags": ("",)}, "tags[0]"), ({"tags": ("x", " \t ")}, "tags[1]"),
    ])
    def test_a_slash_in_a_slot_name_and_an_empty_tag(self, fields: dict, path: str) -> None:
        with pytest.raises(InvalidTextError) as raised:
            check_fields(fields)
        assert raised.value.field == path

    def test_a_slash_elsewhere_and_absent_slot_names_pass(self) -> None:
        check_fields({"content": "a/b", "title": "CI/CD", "subject": None, "label": None, "tags": ()})


def proposal(value: str, valid_from: datetime, item_key: str | None = None) -> StateCard:
    return StateCard(card_id=uuid4(), value=value, memory_type="fact", valid_from=valid_from,
                     valid_to=None, recorded_at=NOW, provenance=Provenance(), item_key=item_key)


class TestAcceptedProposals:
    def test_keep_old_none_accept_new_the_latest_or_the_named(self) -> None:
        a, b, c = (proposal(v, NOW - days(3 - i)) for i, v in enumerate("abc"))
        assert accepted((a, b, c), Decision.KEEP_OLD, None, by_item=False) == ()
        assert accepted((a, b, c), Decision.ACCEPT_NEW, None, by_item=False) == (c,)
        assert accepted((a, b, c), Decision.ACCEPT_NEW, a.card_id, by_item=False) == (a,)

    def test_accept_new_by_item_takes_the_latest_of_each(self) -> None:
        p1, r1, p2 = proposal("py 1", NOW, "py"), proposal("rust", NOW, "rs"), proposal("py 2", NOW, "py")
        assert accepted((p1, r1, p2), Decision.ACCEPT_NEW, None, by_item=True) == (r1, p2)

    def test_both_valid_takes_each_value_once_at_its_earliest(self) -> None:
        late_a, b, early_a = proposal("A", NOW - days(1)), proposal("B", NOW), proposal(" a", NOW - days(9))
        assert accepted((late_a, b, early_a), Decision.BOTH_VALID, None, by_item=False) == (b, early_a)

    def test_a_named_card_must_be_a_proposal_and_only_for_accept_new(self) -> None:
        a = proposal("a", NOW)
        with pytest.raises(CardNotFoundError):
            accepted((a,), Decision.ACCEPT_NEW, uuid4(), by_item=False)
        with pytest.raises(InvalidCommandError):
            accepted((a,), Decision.BOTH_VALID, a.card_id, by_item=False)
