"""The console's read pages in Chromium against a real ``palimpsest serve``: a slot of five
versions draws five, and one opens its card; the time-travel pickers change the answer to the
value then; the cards page lists, pages and draws its counts as bars; a card's graph lists its
neighbours and one opens; another tenant's key sees none of it. No page logs an error, and each is
photographed at 1280×800 and 390×844 into ``console-screenshots/``."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest

from tests.integration.console_support import Console, eventually, shoot, sign_in

pytestmark = pytest.mark.integration

#: The slot's five values, the oldest first; each held for 40 days, the last one still does.
VALUES = ("Taipei", "Kyoto", "高雄", "Osaka", "Nara")
DAYS_AGO = (200, 160, 120, 80, 40)
#: Knowledge cards written beside the slot: more than a page of the cards page (25).
NOTES = 24


@dataclass
class World:
    key: str
    subject: str
    now: datetime
    cards: list[str]
    #: A moment after the third value was recorded and before the fourth.
    between: datetime
    note: str
    event: str
    related: str


def settled(client: Any, subject: str, position: int) -> None:
    eventually(lambda: client.facts(subject, min_position=position)["freshness"]["stale_by"] == 0)


@pytest.fixture(scope="module")
def world(console: Console) -> World:
    key = console.new_key()
    subject = f"user-{uuid4().hex[:8]}"
    now = datetime.now(UTC)
    with console.client(key) as memory:
        cards, between = [], now
        for i, (value, days) in enumerate(zip(VALUES, DAYS_AGO, strict=True)):
            said = now - timedelta(days=days)
            written = memory.remember(kind="state", memory_type="fact", subject=subject,
                                      label="address", content=value, valid_from=said, stated_at=said)
            assert written["outcome"] in ("remembered", "superseded"), written
            cards.append(written["card_id"])
            if i == 2:  # the known-at picker lands between the third and the fourth
                time.sleep(1.2)
                between = datetime.now(UTC)
                time.sleep(1.2)
        # an event affects the slot (the aggregate), which stands for each of its cards
        event = memory.remember(kind="event", memory_type="event", content="Moved to Nara",
                                occurred_at=now - timedelta(days=40), links=[written["aggregate_id"]])
        note = memory.remember(kind="knowledge", memory_type="note", title="Moving checklist",
                               content="Boxes, keys, the new address", tags=["moving"],
                               links=[event["card_id"]])
        related = memory.remember(kind="knowledge", memory_type="note", title="搬家注意事項",
                                  content="記得更新地址", tags=["搬家"])
        memory.link(note["card_id"], "related_to", related["card_id"])
        last = None
        for i in range(NOTES):
            last = memory.remember(kind="knowledge", memory_type="note", title=f"Note {i}",
                                   content=f"A note about the move, number {i}", tags=["notes"])
        assert last is not None
        settled(memory, subject, last["position"])
    return World(key, subject, now, cards, between, note["card_id"], event["card_id"],
                 related["card_id"])


def test_the_timeline_of_a_slot_draws_each_of_its_five_versions(console: Console, page: Any,
                                                                 world: World) -> None:
    sign_in(page, console.url, world.key)
    page.get_by_test_id("nav-timeline").click()
    page.get_by_test_id("timeline-subject").fill(world.subject)
    page.get_by_test_id("timeline-label").fill("address")
    page.get_by_test_id("timeline-show").click()
    versions = page.get_by_test_id("timeline-version")
    versions.first.wait_for()
    assert versions.count() == 5
    drawn = [versions.nth(i).get_attribute("data-card-id") for i in range(5)]
    assert drawn == world.cards, "oldest first, each its own card"
    assert "高雄" in page.locator("svg.timeline").text_content()
    shoot(page, "timeline")
    versions.nth(2).focus()  # a drawn version is reached by the keyboard, and opens its card
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/console/cards/{world.cards[2]}")
    assert page.get_by_role("heading", level=1).inner_text() == "高雄"
    rows = page.get_by_test_id("card-versions").locator("tbody tr")
    assert rows.count() == 2, "recorded, then its validity closed by the fourth"
    assert "validity closed" in rows.nth(1).inner_text()
    shoot(page, "card")


def test_a_cards_id_opens_the_timeline_of_its_whole_slot(console: Console, page: Any,
                                                         world: World) -> None:
    sign_in(page, console.url, world.key)
    page.goto(f"{console.url}/console/cards/{world.cards[0]}")
    page.get_by_test_id("open-timeline").click()
    page.get_by_test_id("timeline-version").first.wait_for()
    assert page.get_by_test_id("timeline-version").count() == 5


def test_the_timeline_marks_retractions_verifications_erasures_and_arbitration_cases(
        console: Console, page: Any) -> None:
    key, subject = console.new_key(), f"user-{uuid4().hex[:8]}"
    with console.client(key) as memory:
        def job(title: str, **extra: Any) -> dict[str, Any]:
            return dict(memory.remember(kind="state", memory_type="fact", subject=subject,
                                        label="job_title", content=title, **extra))

        job("Enginer", session_id="s1", turn_id="7")
        assert job("Engineer", session_id="s1", turn_id="7")["outcome"] == "overwritten"
        assert job("Engineer")["outcome"] == "verified"
        written = [job(title) for title in ("Manager", "Director", "CTO", "Founder")]
        assert written[-1]["outcome"] == "queued", written
        erased = memory.forget("card", card_id=written[0]["card_id"], reason="asked to")
        settled(memory, subject, erased["position"])
    sign_in(page, console.url, key)
    page.goto(f"{console.url}/console/timeline?subject={subject}&label=job_title")
    drawn = page.locator("svg.timeline")
    drawn.wait_for()
    assert page.locator("a.version.retracted").count() == 1, "the slip, withdrawn in its turn"
    assert page.locator(".mark.verified").count() == 1
    assert page.locator("a.version.erased").count() == 1
    assert "erased" in (page.locator("a.version.erased").text_content() or "")
    assert page.locator(".mark.arbitration").count() == 1, "the slot's pending case"
    text = drawn.text_content() or ""
    assert "Manager" not in text and "pending:" in text
    assert page.locator("svg.timeline .edge").count() >= 2, "supersession edges"
    shoot(page, "timeline-marks")
    with console.client(key) as memory:
        decided = memory.decide(written[-1]["case_id"], "keep_old", decided_by="dora")
        settled(memory, subject, decided["position"])
    page.reload()
    drawn.wait_for()
    assert page.locator(".mark.arbitration").count() == 0, "no case is pending now"
    assert page.locator(".mark.decided").count() == 1, "the decided case stays on the timeline"
    assert "keep_old by dora" in (page.locator(".mark.decided").text_content() or "")
    shoot(page, "timeline-decided")


def answer(shown: Any, column: str) -> str:
    return str(shown.get_by_test_id(f"{column}-facts").inner_text())


def test_moving_the_time_travel_pickers_changes_the_answer_to_the_value_then(
        console: Console, page: Any, world: World) -> None:
    sign_in(page, console.url, world.key)
    page.get_by_test_id("nav-time-travel").click()
    page.get_by_test_id("travel-subject").fill(world.subject)
    page.get_by_test_id("travel-question").fill("address")
    page.get_by_test_id("travel-go").click()
    page.get_by_test_id("now-facts").wait_for()
    assert "Nara" in answer(page, "now") and page.get_by_test_id("now-answer").inner_text() == "Nara"
    assert "Pick" in page.get_by_test_id("then").inner_text()

    # valid 150 days ago (as known now): the second value held then
    page.get_by_test_id("valid-at").fill(local(world.now - timedelta(days=150)))
    page.wait_for_function("document.querySelector('[data-testid=then-facts]') !== null")
    assert "Kyoto" in answer(page, "then") and "Nara" not in answer(page, "then")
    assert page.get_by_test_id("then-answer").inner_text() == "Kyoto"
    assert "Nara" in answer(page, "now"), "now stays"

    # valid now, as known between the third and the fourth write: the third was current then
    page.get_by_test_id("valid-at").fill(local(world.now))
    page.wait_for_function("document.querySelector('[data-testid=then-facts]').innerText"
                           ".includes('Nara')")
    page.get_by_test_id("known-at").fill(local(world.between, up=True))
    page.wait_for_function("document.querySelector('[data-testid=then-facts]').innerText"
                           ".includes('高雄')")
    assert "Nara" not in answer(page, "then")
    assert page.get_by_test_id("then-answer").inner_text() == "高雄"
    assert "known_at=" in page.url, "the moments are in the address: a view can be shared"
    shoot(page, "time-travel")


def local(moment: datetime, up: bool = False) -> str:
    """A datetime-local value (the console's zone is UTC) to the second; ``up``: the next one."""
    moment = moment.astimezone(UTC)
    if up:
        moment = datetime.fromtimestamp(math.ceil(moment.timestamp()), UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def test_the_cards_page_lists_pages_and_draws_its_counts(console: Console, page: Any,
                                                         world: World) -> None:
    sign_in(page, console.url, world.key)
    page.get_by_test_id("nav-cards").click()
    rows = page.get_by_test_id("card-row")
    rows.first.wait_for()
    assert rows.count() == 25
    page.wait_for_selector("#counts-chart[data-drawn=true] svg")
    bars = page.locator("#counts-chart svg path")
    assert bars.count() >= 3, "a bar per kind: state, event, knowledge"
    counts = page.get_by_test_id("counts-table").locator("tbody tr")
    assert {counts.nth(i).locator("td").first.text_content() for i in range(counts.count())} == {
        "knowledge", "state", "event"}
    shoot(page, "cards")
    first_page = {rows.nth(i).locator("a").first.get_attribute("href") for i in range(25)}
    page.get_by_test_id("next-page").click()
    page.wait_for_url("**cursor=**")
    rows.first.wait_for()
    later = {rows.nth(i).locator("a").first.get_attribute("href") for i in range(rows.count())}
    # current cards: 1 state (the other four are superseded), 1 event, 26 knowledge = 28
    assert rows.count() == 3 and not later & first_page
    assert page.get_by_test_id("next-page").count() == 0

    page.goto(console.url + "/console/cards")
    page.get_by_test_id("filter-kind").select_option("state")
    page.get_by_test_id("filter-include-superseded").check()
    page.get_by_test_id("group-by").select_option("label")
    page.get_by_test_id("filter-apply").click()
    page.wait_for_url("**kinds=state**")
    assert rows.count() == 5, "the slot's five versions"
    page.wait_for_selector("#counts-chart[data-drawn=true] svg")


def test_a_cards_graph_lists_its_neighbours_and_a_click_opens_one(console: Console, page: Any,
                                                                   world: World) -> None:
    sign_in(page, console.url, world.key)
    page.get_by_test_id("nav-graph").click()
    page.get_by_test_id("graph-card").fill(world.note)
    page.get_by_test_id("graph-show").click()
    nodes = page.get_by_test_id("graph-node")
    nodes.first.wait_for()
    one_hop = {nodes.nth(i).get_attribute("data-card-id") for i in range(nodes.count())}
    assert one_hop == {world.note, world.event, world.related}
    page.wait_for_selector("#graph-canvas[data-drawn=true] canvas")
    page.get_by_test_id("graph-hops").select_option("2")
    page.get_by_test_id("graph-show").click()
    page.wait_for_url("**hops=2**")
    two_hops = {nodes.nth(i).get_attribute("data-card-id") for i in range(nodes.count())}
    assert two_hops == one_hop | set(world.cards), "the event affects the slot: each of its cards"
    shoot(page, "graph")
    page.locator(f"[data-testid=graph-node][data-card-id='{world.related}']").click()
    page.wait_for_url(f"**/console/cards/{world.related}")
    assert page.get_by_role("heading", level=1).inner_text() == "搬家注意事項"
    edges = page.get_by_test_id("edge-link")
    assert edges.count() == 1 and edges.first.inner_text() == "Moving checklist"
    edges.first.click()
    page.wait_for_url(f"**/console/cards/{world.note}")


def test_another_tenants_key_sees_none_of_the_first_tenants_cards(
        console: Console, page: Any, world: World, console_errors: list[str]) -> None:
    sign_in(page, console.url, console.new_key())
    page.goto(console.url + "/console/cards?include_superseded=on")
    assert page.get_by_test_id("card-row").count() == 0
    assert "0 cards" in page.locator("main").inner_text()
    for path in (f"/console/cards/{world.note}", f"/console/graph?card={world.note}",
                 f"/console/timeline?subject={world.subject}&label=address",
                 f"/console/timeline?ref={world.cards[0]}"):
        page.goto(console.url + path)
        assert page.get_by_test_id("problem").is_visible(), path
        assert page.get_by_test_id("timeline-version").count() == 0
        assert page.get_by_test_id("graph-node").count() == 0
        text = page.locator("main").inner_text()
        assert not any(value in text for value in (*VALUES, "Moving checklist")), path
    # the card's page answers 404 (no such card for this key), which the browser logs: expected
    console_errors[:] = [e for e in console_errors if "404" not in e]
    page.goto(f"{console.url}/console/time-travel?subject={world.subject}&q=address"
              f"&valid_at={local(world.now - timedelta(days=150))}")
    assert page.get_by_test_id("now-facts").inner_text() == "no facts"
    assert page.get_by_test_id("then-facts").inner_text() == "no facts"
    assert page.get_by_test_id("now-answer").inner_text() == "nothing found"
