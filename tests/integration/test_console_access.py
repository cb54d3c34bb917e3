"""The console for a person without a mouse, or with a screen reader, in Chromium against a real
``palimpsest serve``: signing in and reaching every page by the keyboard alone (the skip link
first, then each page's link, focus always shown); a timeline version opened by the keyboard; and
on every page what a screen reader reads: the page's language, one ``h1``, a name for every form
control, button, link and drawing, live regions for outcomes and problems."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest

from tests.integration.console_support import Console, eventually

pytestmark = pytest.mark.integration

PAGES = ("arbitration", "proposals", "cards", "timeline", "time-travel", "graph", "operations")

#: What a screen reader needs of a page, found in the page itself: the names it would read.
AUDIT = """() => {
  const named = el => (el.labels && el.labels.length > 0) || el.getAttribute('aria-label')
    || el.getAttribute('aria-labelledby') || el.getAttribute('title')
    || (el.textContent || '').trim() || el.querySelector('title, img[alt]');
  const shown = el => el.offsetParent !== null || el.getClientRects().length > 0;
  const problems = [];
  if (!document.documentElement.lang) problems.push('no lang on <html>');
  if (!document.title.trim()) problems.push('no <title>');
  const h1 = document.querySelectorAll('h1').length;
  if (h1 !== 1) problems.push(h1 + ' h1 elements');
  if (!document.querySelector('main')) problems.push('no <main>');
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (el.type === 'hidden' || !shown(el)) continue;
    if (!(el.labels && el.labels.length) && !el.getAttribute('aria-label')
        && !el.getAttribute('aria-labelledby')) problems.push('unlabelled ' + el.outerHTML.slice(0, 90));
  }
  for (const el of document.querySelectorAll('button, a[href]')) {
    if (shown(el) && !named(el)) problems.push('nameless ' + el.outerHTML.slice(0, 90));
  }
  for (const el of document.querySelectorAll('svg')) {
    // inside a link, a button or a box that is itself the named image, a drawing is presentational
    if (el.parentElement.closest('a, button, [aria-hidden="true"], [role="img"][aria-label]')) continue;
    if (!el.getAttribute('aria-label') && !el.getAttribute('aria-labelledby')
        && !el.querySelector(':scope > title')) problems.push('an unnamed drawing');
  }
  for (const el of document.querySelectorAll('canvas')) {
    const box = el.closest('[role="img"], [aria-label]');
    if (!box) problems.push('an unnamed chart');
  }
  for (const el of document.querySelectorAll('[data-testid="outcome"], [data-testid="problem"]')) {
    if (!['status', 'alert'].includes(el.getAttribute('role'))) problems.push('a silent outcome');
  }
  const ids = [...document.querySelectorAll('[id]')].map(el => el.id);
  const twice = ids.filter((id, i) => ids.indexOf(id) !== i);
  if (twice.length) problems.push('ids used twice: ' + [...new Set(twice)].join(', '));
  return problems;
}"""

#: The focused element, and how its focus shows: its outline, or for a version drawn in the
#: timeline (a link inside the drawing) the stroke of its rectangle.
FOCUSED = """() => { const el = document.activeElement; const style = getComputedStyle(el);
  const box = el.closest('svg') && el.querySelector('.box');
  const shown = box ? parseFloat(getComputedStyle(box).strokeWidth) >= 3
                    : style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0;
  return {testid: el.dataset.testid || null, tag: el.tagName.toLowerCase(), id: el.id || null,
          href: el.getAttribute('href'), text: (el.textContent || '').trim().slice(0, 40), shown}; }"""


def tab_to(page: Any, wanted: Any, limit: int = 60) -> dict[str, Any]:
    """Press Tab until ``wanted(focused)`` holds; every element on the way shows its focus."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if focused["tag"] != "body":
            assert focused["shown"], f"focus not shown on {focused}"
        if wanted(focused):
            return dict(focused)
    raise AssertionError(f"not reached by {limit} presses of Tab")


@pytest.fixture(scope="module")
def world(console: Console) -> dict[str, Any]:
    key = console.new_key()
    subject = f"user-{uuid4().hex[:6]}"
    with console.client(key) as memory:
        for value in ("Paris", "Lyon", "Nice", "Rome"):
            written = memory.remember(kind="state", memory_type="fact", subject=subject,
                                      label="address", content=value)
        assert written["outcome"] == "queued", written
        note = memory.remember(kind="knowledge", memory_type="note", title="旅行計畫",
                               content="Rome in spring", tags=["travel"])
        other = memory.remember(kind="knowledge", memory_type="note", title="Rome",
                                content="A city of Italy", tags=["travel"])
        linked = memory.link(note["card_id"], "related_to", other["card_id"])
        eventually(lambda: memory.arbitrations(min_position=linked["position"])["cases"])
    return {"key": key, "subject": subject, "card": note["card_id"]}


def test_sign_in_and_every_page_by_the_keyboard_alone(console: Console, page: Any,
                                                      world: dict[str, Any]) -> None:
    page.goto(console.url + "/console/sign-in")
    tab_to(page, lambda f: f["testid"] == "key-input")
    page.keyboard.type(world["key"])
    page.keyboard.press("Enter")
    page.wait_for_url("**/console/arbitration")

    first = tab_to(page, lambda f: True, limit=1)
    assert first["href"] == "#main", f"the skip link comes first, not {first}"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"

    for slug in PAGES:
        page.evaluate("document.activeElement.blur()")
        tab_to(page, lambda f, slug=slug: f["testid"] == f"nav-{slug}")
        page.keyboard.press("Enter")
        page.wait_for_url(f"**/console/{slug}")
        current = page.locator(f'[data-testid="nav-{slug}"]').get_attribute("aria-current")
        assert current == "page", slug


def test_a_case_is_decided_and_a_version_opened_by_the_keyboard(console: Console, page: Any,
                                                                 world: dict[str, Any]) -> None:
    page.goto(console.url + "/console/sign-in")
    page.get_by_test_id("key-input").fill(world["key"])
    page.get_by_test_id("key-input").press("Enter")
    page.wait_for_url("**/console/arbitration")
    tab_to(page, lambda f: f["testid"] == "both-valid")
    page.keyboard.press("Enter")
    page.get_by_test_id("outcome").wait_for()
    assert "both" in page.get_by_test_id("outcome").inner_text().lower()

    page.goto(f"{console.url}/console/timeline?subject={world['subject']}&label=address")
    tab_to(page, lambda f: f["testid"] == "timeline-version")
    page.keyboard.press("Enter")
    page.wait_for_url("**/console/cards/*")


def test_every_page_names_what_a_screen_reader_reads(console: Console, page: Any,
                                                     world: dict[str, Any]) -> None:
    page.goto(console.url + "/console/sign-in")
    assert page.evaluate(AUDIT) == [], "sign-in"
    page.get_by_test_id("key-input").fill(world["key"])
    page.get_by_test_id("sign-in").click()
    page.wait_for_url("**/console/arbitration")
    card, subject = world["card"], world["subject"]
    for path in (*PAGES, f"timeline?subject={subject}&label=address", f"cards/{card}",
                 f"graph?card={card}", f"time-travel?subject={subject}",
                 "cards?group_by=kind"):
        page.goto(f"{console.url}/console/{path}")
        page.wait_for_load_state("networkidle")
        assert page.evaluate(AUDIT) == [], path
