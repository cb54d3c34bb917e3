"""The tags route's plan: which units it reads whole and which it counts only where a rarer one is,
their weights, and the counts it caches."""

from __future__ import annotations

import math

from services.query.retrieval.lexicon import concept_terms
from services.query.retrieval.tags import Counts, Plan, idf, units

TOTAL = 100_000


def plan(counts: dict[str, int], *, names: dict[int, str] | None = None,
         name_counts: dict[str, int] | None = None, common: int = 1_000) -> Plan:
    words = list(counts)
    return Plan.of(words, list(range(len(words))), words, names or {}, TOTAL, common, counts,
                   name_counts or {})


def test_a_common_unit_is_counted_only_on_the_cards_of_the_rarer_ones() -> None:
    p = plan({"kafka": 300, "alice": 2_700, "meeting": 5_000})
    assert p.read == {0}
    assert p.words(["kafka", "alice", "meeting"], [0, 1, 2], read=True) == ["kafka"]
    assert p.words(["kafka", "alice", "meeting"], [0, 1, 2], read=False) == ["alice", "meeting"]
    assert p.weights[0] > p.weights[1] > p.weights[2]
    assert p.weights[1] == idf(TOTAL, 2_700)
    assert p.note(["kafka", "alice", "meeting"]) == "; counted where a rarer one is: alice | meeting"


def test_when_every_unit_is_common_the_rarest_is_read_up_to_the_cap() -> None:
    p = plan({"code": 3_900, "review": 3_800, "note": 5_000})
    assert p.read == {1}
    assert p.read_cap == 1_000
    assert plan({"kafka": 300, "note": 5_000}).read_cap is None


def test_every_rare_unit_is_read_and_a_unit_no_card_holds_is_neither() -> None:
    p = plan({"pgvector": 40, "qwerty": 0, "search": 900})
    assert p.read == {0, 2}
    assert p.found == {0, 2}
    assert p.words(["pgvector", "qwerty", "search"], [0, 1, 2], read=False) == []


def test_a_mentioned_name_is_read_whole_when_no_commoner_than_what_is_read() -> None:
    few = plan({"王小明": 10, "讨论": 5_000}, names={0: "王小明"}, name_counts={"王小明": 1_500})
    assert few.read == {0}  # the rarest, read up to the cap
    beside = plan({"王小明": 10, "串流": 800, "讨论": 5_000}, names={0: "王小明"},
                  name_counts={"王小明": 700})
    assert beside.read == {0, 1}
    costly = plan({"王小明": 10, "串流": 300}, names={0: "王小明"}, name_counts={"王小明": 2_000})
    assert costly.read == {1}  # checked on the 300 cards found instead of read on 2,010


def test_strength_is_the_share_of_the_weight_a_card_holds() -> None:
    p = plan({"kafka": 300, "alice": 2_700})
    both = p.weights[0] + p.weights[1]
    assert p.strength({"weight": both}, TOTAL, [0, 1]) == 1.0
    assert math.isclose(p.strength({"weight": p.weights[0]}, TOTAL, [0, 1]), p.weights[0] / both)
    lonely = plan({"kafka": 300, "qwerty": 0})  # a word no card holds counts as if one did
    assert lonely.strength({"weight": lonely.weights[0]}, TOTAL, [0, 1]) < 0.5


def test_a_concept_joins_the_first_of_the_query_s_terms_that_names_it() -> None:
    # "phone" and "number" both name the phone concept: its labels join "phone", in any process
    assert {"phone", "number"} <= concept_terms("phone")
    words, unit_of, names = units("what's my phone number?")
    assert names == ["what", "phone", "number"]
    assert {unit for word, unit in zip(words, unit_of, strict=True)
            if word.startswith("=label:")} == {names.index("phone")}


def test_counts_are_read_once_per_ttl_and_only_those_missing() -> None:
    now = [0.0]
    counts = Counts(ttl=60.0, clock=lambda: now[0])
    asked: list[list[str]] = []

    def read(missing: list[str]) -> dict[str, int]:
        asked.append(missing)
        return {word: len(word) for word in missing}

    assert counts._get("t", "term", ["ab", "abc"], read) == {"ab": 2, "abc": 3}
    assert counts._get("t", "term", ["ab", "abcd"], read) == {"ab": 2, "abcd": 4}
    assert counts._get("u", "term", ["ab"], read) == {"ab": 2}  # another tenant's own
    now[0] = 61.0
    assert counts._get("t", "term", ["ab"], read) == {"ab": 2}
    assert asked == [["ab", "abc"], ["abcd"], ["ab"], ["ab"]]
