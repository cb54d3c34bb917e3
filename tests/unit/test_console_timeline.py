"""The slot timeline's layout (services.console.timeline.draw), without a server: each card of a
slot one drawn version, each row of its history a rectangle [valid_from, valid_to) × [known_from,
known_to), open ends at the plot's edges, and the edges, retractions, verifications, erasures and
pending cases where they happened."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4
from zoneinfo import ZoneInfo

from services.console.timeline import BOTTOM, LEFT, MIN_SIDE, RIGHT, TOP, draw, fit
from services.entrypoints.schemas import ArbitrationCase
from services.query.queries import CardHistory, Version

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def version(n: int, value: str | None, valid: tuple[datetime, datetime | None],
            known: tuple[datetime, datetime | None], **extra: Any) -> Version:
    fields: dict[str, Any] = {"version": n, "value": value, "title": None, "status": None,
                              "valid_from": valid[0], "valid_to": valid[1], "known_from": known[0],
                              "known_to": known[1], "retracted": False, "verified_at": None,
                              "change": "recorded" if n == 1 else "validity closed"}
    return Version(**{**fields, **extra})


def card(versions: list[Version], edges: list[dict[str, Any]] | None = None,
         card_id: UUID | None = None, **extra: Any) -> CardHistory:
    return CardHistory(card_id=card_id or uuid4(), kind="state", memory_type="fact", subject="user",
                       label="address", versions=versions, edges=edges or [], **extra)


def slot_of(values: list[str]) -> list[CardHistory]:
    """A single-value slot whose values each held 40 days, each superseding the one before,
    recorded a day apart: the earlier cards have two versions (open, then closed)."""
    ids = [uuid4() for _ in values]
    cards = []
    for i, value in enumerate(values):
        start, heard = NOW - (len(values) - i) * 40 * DAY, NOW - (len(values) - i) * DAY
        edges = [{"src_id": ids[i], "dst_id": ids[i - 1], "edge": "supersedes",
                  "recorded_at": heard}] if i else []
        if i + 1 < len(values):
            end, replaced = start + 40 * DAY, heard + DAY
            rows = [version(1, value, (start, None), (heard, replaced)),
                    version(2, value, (start, end), (replaced, None))]
            edges.append({"src_id": ids[i + 1], "dst_id": ids[i], "edge": "supersedes",
                          "recorded_at": replaced})
        else:
            rows = [version(1, value, (start, None), (heard, None))]
        cards.append(card(rows, edges, ids[i]))
    return cards


def test_each_card_of_the_slot_is_one_drawn_version() -> None:
    layout = draw(slot_of(["Taipei", "Kyoto", "Osaka", "Nara", "Kobe"]), NOW)
    assert [d.text for d in layout.cards] == ["Taipei", "Kyoto", "Osaka", "Nara", "Kobe"]
    assert [len(d.boxes) for d in layout.cards] == [2, 2, 2, 2, 1]
    assert [d.status for d in layout.cards] == ["closed"] * 4 + ["current"]
    assert len({d.colour for d in layout.cards}) == 5, "each version its own colour"


def test_a_rectangle_spans_its_valid_and_known_times() -> None:
    slot = slot_of(["Taipei", "Kyoto"])
    first, second = draw(slot, NOW).cards
    believed, closed = first.boxes
    assert (believed.valid_from, believed.valid_to) == (NOW - 80 * DAY, None)
    assert (closed.valid_from, closed.valid_to) == (NOW - 80 * DAY, NOW - 40 * DAY)
    assert closed.known_from == believed.known_to == NOW - DAY
    # valid time runs across, recorded time up (SVG's y grows downwards)
    assert closed.x == believed.x and closed.x + closed.width < believed.x + believed.width
    assert closed.y + closed.height <= believed.y + 0.001, "the closed version is known later: higher"
    assert second.boxes[0].x > closed.x
    for box in (*first.boxes, *second.boxes):
        assert box.x >= LEFT and box.x + box.width <= RIGHT + 0.001
        assert box.y >= TOP - 0.001 and box.y + box.height <= BOTTOM + 0.001


def test_open_ends_reach_the_right_and_top_edges() -> None:
    layout = draw(slot_of(["Taipei", "Kyoto"]), NOW)
    current = layout.cards[-1].boxes[0]
    assert current.open_valid and current.open_known
    assert current.x + current.width == RIGHT and current.y == TOP
    believed, closed = layout.cards[0].boxes
    assert believed.open_valid and not believed.open_known
    assert not closed.open_valid and closed.open_known


def test_supersession_is_drawn_between_the_slots_versions_only() -> None:
    slot = slot_of(["Taipei", "Kyoto", "Osaka"])
    slot[0].edges.append({"src_id": uuid4(), "dst_id": slot[0].card_id, "edge": "affects",
                          "recorded_at": NOW})
    slot[0].edges.append({"src_id": uuid4(), "dst_id": slot[0].card_id, "edge": "supersedes",
                          "recorded_at": NOW})
    arrows = draw(slot, NOW).arrows
    assert {(a.src, a.dst, a.edge) for a in arrows} == {
        (slot[1].card_id, slot[0].card_id, "supersedes"),
        (slot[2].card_id, slot[1].card_id, "supersedes")}, "once each, an outside card never"
    layout = draw(slot, NOW)
    newer = next(d for d in layout.cards if d.card_id == slot[1].card_id)
    arrow = next(a for a in arrows if a.src == slot[1].card_id)
    assert (arrow.x1, arrow.y1) == newer.anchor


def test_an_instant_version_is_still_drawn() -> None:
    at = NOW - DAY
    slip = card([version(1, "Enginer", (at, None), (at, at)),
                 version(2, "Enginer", (at, None), (at, None), retracted=True, change="retracted")])
    fixed = card([version(1, "Engineer", (at, None), (at, None))])
    layout = draw([slip, fixed], NOW)
    drawn = layout.cards[0]
    assert drawn.boxes[0].height == MIN_SIDE and drawn.status == "retracted"
    assert len(drawn.boxes) == 1, "withdrawn, it is believed no more: no rectangle after it"
    assert [m.kind for m in drawn.marks] == ["retracted"] and drawn.marks[0].at == at


def test_verifications_are_marked_once_each_where_they_happened() -> None:
    heard, checked = NOW - 10 * DAY, NOW - 2 * DAY
    verified = card([version(1, "Taipei", (heard, None), (heard, checked)),
                     version(2, "Taipei", (heard, None), (checked, None), verified_at=checked,
                             change="verified")])
    layout = draw([verified], NOW)
    marks = layout.cards[0].marks
    assert [(m.kind, m.at) for m in marks] == [("verified", checked)]
    assert marks[0].y == layout.known.at(checked)
    assert marks[0].x == layout.cards[0].boxes[1].x + MIN_SIDE, "on the version known then"


def test_a_tombstone_is_drawn_labelled_erased() -> None:
    heard, erased = NOW - 30 * DAY, NOW - DAY
    gone = card([version(1, None, (heard, None), (heard, None), erased_at=erased)], erased_at=erased)
    drawn = draw([gone], NOW).cards[0]
    assert drawn.status == "erased" and drawn.text == "erased" and drawn.value is None
    assert [(m.kind, m.at) for m in drawn.marks] == [("erased", erased)]
    assert len(drawn.boxes) == 1, "its times stay"


def test_a_pending_case_is_marked_where_its_proposal_would_start() -> None:
    slot = slot_of(["Taipei", "Kyoto"])
    case = ArbitrationCase(case_id=uuid4(), slot_id=uuid4(), subject="user", label="address",
                           current_values=["Kyoto"], proposed_value="大阪", proposed_card_id=uuid4(),
                           proposed_valid_from=NOW - 100 * DAY, reason="large span",
                           opened_at=NOW - DAY / 2)
    layout = draw(slot, NOW, [case])
    (mark,) = layout.cases
    assert mark.kind == "arbitration" and mark.text == "pending: 大阪"
    assert (mark.x, mark.y) == (layout.valid.at(case.proposed_valid_from), layout.known.at(case.opened_at))
    assert layout.valid.start < case.proposed_valid_from, "the axes make room for it"


def test_ticks_are_written_in_the_zone_asked_for() -> None:
    layout = draw(slot_of(["Taipei", "Kyoto"]), NOW, zone=ZoneInfo("Asia/Taipei"))
    assert len(layout.x_ticks) == 5 and all(len(t.text) == 10 for t in layout.x_ticks), "dates"
    assert [t.position for t in layout.x_ticks] == sorted(t.position for t in layout.x_ticks)
    assert [t.position for t in layout.y_ticks] == sorted((t.position for t in layout.y_ticks),
                                                          reverse=True), "later is higher"
    first = layout.x_ticks[0]
    assert first.text == first.at.astimezone(ZoneInfo("Asia/Taipei")).strftime("%Y-%m-%d")


def test_moments_seconds_apart_get_clock_ticks() -> None:
    at = NOW - timedelta(seconds=30)
    layout = draw([card([version(1, "Taipei", (at, None), (at, None))])], NOW)
    assert all(t.text.count(":") == 2 for t in layout.y_ticks)
    assert layout.now_y < layout.known.at(at), "now is above what was recorded before it"


def test_a_label_is_cut_to_its_rectangle_wide_characters_counted_wide() -> None:
    assert fit("Taipei", 100) == "Taipei"
    assert fit("Kaohsiung City", 60) == "Kaohsi…"
    assert fit("高雄市前鎮區", 60) == "高雄市…" and fit("高雄", 20) == ""
    long = "an address far longer than the forty days it held could ever show " * 2
    first, second = draw(slot_of([long, "Kyoto"]), NOW).cards
    assert first.caption.endswith("…") and len(first.caption) < len(long)
    assert second.caption == "Kyoto"
