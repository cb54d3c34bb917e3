"""The console's sign-in and action pages in Chromium against a real ``palimpsest serve``: a
wrong key cannot sign in; three pending cases are decided, one with each button, and each decision
shows in ``history`` over REST; a proposal is accepted and another rejected; a dead-lettered turn
is re-run; a parked event is skipped with a reason and another retried after its fix; an erasure
is requested through its confirmation; a form posted without its CSRF token is refused and changes
nothing; another tenant's key sees none of it. No page logs an error, and each is photographed at
1280×800 and 390×844 into ``console-screenshots/``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import httpx
import pytest
from palimpsest_client import NotFoundError

from tests.fakes.openai_server import NO_CANDIDATES
from tests.integration.console_support import Console, eventually, shoot, sign_in

pytestmark = pytest.mark.integration

#: A slot's four values: the fourth change within 30 days is held for a person (rule 4).
SLOTS = {"address": ("Paris", "Lyon", "Nice", "Rome"),
         "employer": ("Acme", "Globex", "Initech", "Umbrella"),
         "城市": ("台北", "高雄", "台中", "台南")}


def queue_cases(memory: Any, subject: str) -> dict[str, dict[str, Any]]:
    """One pending case per slot of ``SLOTS`` for ``subject``, by label, once the read models
    hold them."""
    for label, values in SLOTS.items():
        for i, value in enumerate(values):
            written = memory.remember(kind="state", memory_type="fact", subject=subject,
                                      label=label, content=value, agent_id=f"agent-{i}",
                                      session_id=f"session-{i}", source="agent_inferred",
                                      inference_confidence=0.6 + i / 10)
        assert written["outcome"] == "queued", written
    found = memory.arbitrations(min_position=written["position"])["cases"]
    cases = [case for case in found if case["subject"] == subject]
    assert len(cases) == len(SLOTS), found
    return {case["label"]: case for case in cases}


def current_values(memory: Any, ref: str) -> list[str]:
    """The values of ``ref``'s slot valid now, as known now (REST ``history``)."""
    found = memory.history(ref)
    return sorted(v["value"] for card in found["cards"] for v in card["versions"]
                  if v["known_to"] is None and v["valid_to"] is None and not v["retracted"])


def every_value(memory: Any, ref: str) -> set[str]:
    return {v["value"] for card in memory.history(ref)["cards"] for v in card["versions"]}


@contextmanager
def session(url: str, key: str) -> Iterator[httpx.Client]:
    """An HTTP client signed in to the console as ``key`` (the sign-in form's token included)."""
    with httpx.Client(base_url=url, follow_redirects=False, timeout=30) as browser:
        form = browser.get("/console/sign-in")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token, form.text
        signed = browser.post("/console/sign-in", data={"key": key, "csrf_token": token.group(1)})
        assert signed.status_code == 303, signed.text
        yield browser


def test_a_wrong_key_cannot_sign_in_and_a_right_one_can(console: Console, page: Any,
                                                        console_errors: list[str]) -> None:
    key = console.new_key()
    page.goto(console.url + "/console/arbitration")
    page.wait_for_url("**/console/sign-in")  # no session: to the sign-in form
    shoot(page, "sign-in")
    page.get_by_test_id("key-input").fill("pk_" + "x" * 43)
    with page.expect_response(lambda r: r.url.endswith("/console/sign-in")
                              and r.request.method == "POST") as answered:
        page.get_by_test_id("sign-in").click()
    assert answered.value.status == 401
    assert "not a live API key" in page.get_by_test_id("problem").inner_text()
    assert page.get_by_test_id("nav-arbitration").count() == 0
    assert all("401" in e for e in console_errors), console_errors  # the refused page's own status
    console_errors.clear()
    page.get_by_test_id("key-input").fill("")
    page.get_by_test_id("key-input").focus()
    page.keyboard.type(key)  # by keyboard alone
    page.keyboard.press("Enter")
    page.wait_for_url("**/console/arbitration")
    for name in ("arbitration", "proposals", "cards", "timeline", "time-travel", "graph",
                 "operations"):
        assert page.get_by_test_id(f"nav-{name}").count() == 1
    cookie = next(c for c in page.context.cookies() if c["name"] == "palimpsest_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    page.get_by_test_id("sign-out").click()
    page.wait_for_url("**/console/sign-in")
    page.goto(console.url + "/console/operations")
    page.wait_for_url("**/console/sign-in")
    page.context.add_cookies([cookie])  # the signed-out session's cookie, replayed
    page.goto(console.url + "/console/operations")
    page.wait_for_url("**/console/sign-in")  # ended on the server, not only in the browser


def test_three_cases_decided_one_with_each_button_show_in_history(
        console: Console, page: Any) -> None:
    key = console.new_key()
    subject = f"user-{uuid4().hex[:6]}"
    with console.client(key) as memory:
        cases = queue_cases(memory, subject)
        sign_in(page, console.url, key)
        assert page.get_by_test_id("case").count() == 3
        first = page.locator(f'[data-case-id="{cases["address"]["case_id"]}"]')
        assert "Nice" in first.get_by_test_id("current").inner_text()
        assert "agent-2" in first.get_by_test_id("current").inner_text()
        assert "session-2" in first.get_by_test_id("current").inner_text()
        proposed = first.get_by_test_id("proposed").inner_text()
        assert "Rome" in proposed and "agent-3" in proposed and "session-3" in proposed
        assert "0.90" in proposed
        assert "台中" in page.locator(f'[data-case-id="{cases["城市"]["case_id"]}"]').inner_text()
        shoot(page, "arbitration")
        for label, button, said in (("address", "keep-old", "Keep old"),
                                    ("employer", "accept-new", "Accept new"),
                                    ("城市", "both-valid", "Both valid")):
            case = page.locator(f'[data-testid="case"][data-case-id="{cases[label]["case_id"]}"]')
            case.get_by_test_id("reason").fill(f"checked {label} with the user")
            if button == "keep-old":  # by keyboard: Tab from the reason reaches the first button
                case.get_by_test_id("reason").focus()
                page.keyboard.press("Tab")
                focused = page.evaluate("[document.activeElement.dataset.testid, "
                                        "getComputedStyle(document.activeElement).outlineStyle]")
                assert focused == ["keep-old", "solid"], focused  # and its focus shows
                page.keyboard.press("Enter")
            else:
                case.get_by_test_id(button).click()
            decided = page.locator(f'[data-testid="decided"][data-case-id="{cases[label]["case_id"]}"]')
            decided.wait_for()
            assert decided.get_by_test_id("outcome").inner_text().startswith(f"{said}: {subject} / {label}")
        shoot(page, "arbitration-decided")
        assert page.get_by_test_id("case").count() == 0
        page.reload()
        assert page.get_by_test_id("case").count() == 0
        assert page.get_by_test_id("no-cases").is_visible()

        assert memory.arbitrations()["cases"] == []
        assert current_values(memory, f"{subject}/address") == ["Nice"]
        assert "Rome" not in every_value(memory, f"{subject}/address")  # kept old: dropped
        assert current_values(memory, f"{subject}/employer") == ["Umbrella"]  # accepted
        assert "Initech" in every_value(memory, f"{subject}/employer")
        # both valid: each value for its stretch, the proposed one from its valid-from on
        assert current_values(memory, f"{subject}/城市") == ["台南"]
        stretches = {v["value"]: v for card in memory.history(f"{subject}/城市")["cards"]
                     for v in card["versions"] if v["known_to"] is None}
        assert stretches["台中"]["valid_to"] == stretches["台南"]["valid_from"]
        assert not stretches["台中"]["retracted"]


def test_a_proposal_accepted_and_another_rejected(console: Console, page: Any) -> None:
    key = console.new_key()
    with console.client(key) as memory:
        for subject, old, new in (("bob", "Berlin", "Munich"), ("carol", "Oslo", "Bergen")):
            memory.remember(kind="state", memory_type="fact", subject=subject, label="address",
                            content=old)
            memory.remember(kind="state", memory_type="fact", subject=subject, label="home_city",
                            content=new)
        found = eventually(lambda: (p := memory.proposals()["proposals"]) and len(p) == 2 and p,
                           timeout=90)
        sign_in(page, console.url, key)
        page.get_by_test_id("nav-proposals").click()
        page.wait_for_url("**/console/proposals")
        assert page.get_by_test_id("proposal").count() == 2
        text = page.get_by_test_id("proposal").first.inner_text()
        assert "score" in text and "supersedes" in text
        cards = page.get_by_test_id("proposal-card").all_inner_texts()
        assert any("Berlin" in c for c in cards) and any("Bergen" in c for c in cards), cards
        shoot(page, "proposals")
        accepted, rejected = found[0]["proposal_id"], found[1]["proposal_id"]
        for proposal_id, button in ((accepted, "accept"), (rejected, "reject")):
            item = page.locator(f'[data-testid="proposal"][data-proposal-id="{proposal_id}"]')
            item.get_by_test_id("note").fill(f"{button}ed in the console")
            item.get_by_test_id(button).click()
            page.locator(f'[data-testid="reviewed-proposal"]#proposal-{proposal_id}').wait_for()
        assert page.get_by_test_id("proposal").count() == 0
        (yes,) = eventually(lambda: memory.proposals(review="accepted")["proposals"])
        (no,) = eventually(lambda: memory.proposals(review="rejected")["proposals"])
        assert (yes["proposal_id"], no["proposal_id"]) == (accepted, rejected)
        assert no["note"] == "rejected in the console"
        assert yes["reviewed_by"].startswith("console test (key_")  # the key's name and id


def test_a_dead_letter_is_re_run(console: Console, page: Any) -> None:
    key = console.new_key()
    with console.client(key) as memory:
        memory.ingest([{"session_id": "chat-1", "turn_id": "1", "role": "user",
                        "text": "I moved to Kyoto last week", "said_at": datetime.now(UTC)}])
        dead = eventually(lambda: memory.ingestions(status="dead_letter")["ingestions"])
        sign_in(page, console.url, key)
        page.get_by_test_id("nav-operations").click()
        page.wait_for_url("**/console/operations")
        row = page.locator(f'[data-testid="dead-letter"][data-ingestion-id="{dead[0]["ingestion_id"]}"]')
        assert "500" in row.inner_text()
        assert page.get_by_test_id("pipeline").is_visible()
        shoot(page, "operations")
        console.llm.script(NO_CANDIDATES)  # the model answers this time
        row.get_by_test_id("rerun").click()
        page.wait_for_url("**/console/operations?done=*")
        assert "re-run" in page.get_by_test_id("outcome").inner_text()
        eventually(lambda: memory.ingestions()["ingestions"][0]["status"] in ("extracted", "applied"))
        page.reload()
        assert page.get_by_test_id("no-dead-letters").is_visible()


def poison(console: Console, *args: str) -> dict[str, Any]:
    """``tests.plant_poison`` run against the console's server (its data folder)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")}
    env["PALIMPSEST_DATA_DIR"] = str(console.data)
    done = subprocess.run([sys.executable, "-m", "tests.plant_poison", *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_parked_events_are_skipped_and_retried(console: Console, page: Any) -> None:
    tenant = "t-" + uuid4().hex[:12]
    key = console.new_key(tenant)
    lost, fixed = poison(console, "plant", tenant), poison(console, "plant", tenant)
    with console.client(key) as memory:
        eventually(lambda: memory.status()["parked"] == 2)
        sign_in(page, console.url, key)
        page.get_by_test_id("nav-operations").click()
        page.wait_for_url("**/console/operations")
        rows = page.get_by_test_id("parked-event")
        assert rows.count() == 2
        assert "undecodable" in rows.first.inner_text()
        shoot(page, "operations-parked")

        rows.first.get_by_test_id("skip").click()  # a skip needs its reason: the browser asks
        assert page.get_by_test_id("parked-event").count() == 2
        rows.first.get_by_test_id("skip-reason").fill("written by a release nobody runs")
        rows.first.get_by_test_id("skip").click()
        page.wait_for_url("**/console/operations?done=*")
        assert "skip" in page.get_by_test_id("outcome").inner_text()
        assert page.get_by_test_id("parked-event").count() == 1

        assert poison(console, "restore", fixed["card_id"], fixed["topic"]) == {"restored": 1}
        page.get_by_test_id("parked-event").get_by_test_id("retry").click()
        page.wait_for_url("**/console/operations?done=*")
        assert "retr" in page.get_by_test_id("outcome").inner_text()
        assert page.get_by_test_id("no-parked").is_visible()
        assert memory.status()["parked"] == 0
        assert memory.card(fixed["card_id"])["card_id"] == fixed["card_id"], "applied"
        with pytest.raises(NotFoundError):
            memory.card(lost["card_id"])


def test_an_erasure_is_confirmed_before_it_runs(console: Console, page: Any) -> None:
    key = console.new_key()
    subject = f"dora-{uuid4().hex[:6]}"
    with console.client(key) as memory:
        written = memory.remember(kind="state", memory_type="fact", subject=subject,
                                  label="address", content="12 Rue des Lilas")
        memory.facts(subject, min_position=written["position"])
        sign_in(page, console.url, key)
        page.goto(console.url + "/console/operations")
        page.get_by_test_id("erasure-unit").select_option("subject")
        page.get_by_test_id("erasure-subject").fill(subject)
        page.get_by_test_id("erasure-reason").fill("asked by the person")
        page.get_by_test_id("erasure-review").click()
        confirmation = page.get_by_test_id("erasure-confirmation")
        confirmation.wait_for()
        assert subject in page.get_by_test_id("erasure-named").inner_text()
        assert page.get_by_test_id("erasure-count").inner_text() == "1"
        assert "12 Rue des Lilas" in page.get_by_test_id("erasure-values").inner_text()
        assert memory.erasures()["erasures"] == []  # nothing forgotten before the confirmation
        shoot(page, "erasure-confirmation")
        page.get_by_test_id("erasure-confirm").click()
        page.wait_for_url("**/console/operations?done=*")
        assert "forgot the subject" in page.get_by_test_id("outcome").inner_text()
        assert page.get_by_test_id("erasure").count() == 1
        (erasure,) = memory.erasures()["erasures"]
        assert erasure["unit"] == "subject" and erasure["cards"] == 1
        eventually(lambda: all(f["value"] is None for f in memory.facts(subject)["facts"]))


def test_a_form_without_its_csrf_token_is_refused(console: Console) -> None:
    key = console.new_key()
    with console.client(key) as memory, session(console.url, key) as signed:
        cases = queue_cases(memory, "user")
        case_id = cases["address"]["case_id"]
        target = f"/console/arbitration/{case_id}/decision"
        assert signed.post(target, data={"decision": "accept_new"}).status_code == 403
        assert signed.post(target, data={"decision": "accept_new", "csrf_token": "forged"}
                           ).status_code == 403
        assert signed.post(target, data={"decision": "accept_new"},
                           headers={"X-CSRF-Token": "forged"}).status_code == 403
        assert signed.post("/console/operations/erasures/confirm",
                           data={"unit": "subject", "subject": "user"}).status_code == 403
        assert len(memory.arbitrations()["cases"]) == 3  # nothing was decided
        page = signed.get("/console/arbitration")
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert token
        done = signed.post(target, data={"decision": "keep_old", "csrf_token": token.group(1)})
        assert done.status_code == 303
        eventually(lambda: len(memory.arbitrations()["cases"]) == 2)
    anonymous = httpx.post(console.url + target, data={"decision": "keep_old"},
                           follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"].endswith("/sign-in")


def test_a_second_tenant_sees_none_of_the_first(console: Console, page: Any) -> None:
    first, second = console.new_key(), console.new_key()
    with console.client(first) as memory:
        cases = queue_cases(memory, "user")
        memory.remember(kind="state", memory_type="fact", subject="erin", label="address",
                        content="Rome")
        memory.remember(kind="state", memory_type="fact", subject="erin", label="home_city",
                        content="Milan")
        eventually(lambda: memory.proposals()["proposals"], timeout=90)
        memory.ingest([{"session_id": "s", "turn_id": "1", "role": "user", "text": "hello",
                        "said_at": datetime.now(UTC)}])
        eventually(lambda: memory.ingestions(status="dead_letter")["ingestions"])
    sign_in(page, console.url, second)
    assert page.get_by_test_id("case").count() == 0
    assert "Rome" not in page.content()
    page.goto(console.url + "/console/proposals")
    assert page.get_by_test_id("proposal").count() == 0
    page.goto(console.url + "/console/operations")
    assert page.get_by_test_id("dead-letter").count() == 0
    with session(console.url, second) as signed:  # deciding the first's case: not found
        form = signed.get("/console/arbitration")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token
        answer = signed.post(f"/console/arbitration/{cases['address']['case_id']}/decision",
                             data={"decision": "accept_new", "csrf_token": token.group(1)})
        assert answer.status_code == 422 and "not_found" in answer.text
    with console.client(first) as memory:
        assert len(memory.arbitrations()["cases"]) == 3
