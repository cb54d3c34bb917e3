"""``palimpsest serve --workers 2``: two HTTP worker processes share the socket serve bound. Both
take connections; ``/metrics`` counts what both answered; a write answered by one is read through
the other with ``min_position``; a console session made by one is good on the other; MCP answers
across them; a worker killed is started again while the other goes on answering, and no write it
acknowledged is lost; SIGTERM stops them all in time."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import anyio
import httpx
import psutil
import pytest
from palimpsest_client import Client

from tests.integration.test_mcp import call, http_session
from tests.integration.test_serve import STOP_SECONDS, Served, values, wait_ready

pytestmark = pytest.mark.integration

#: What Prometheus would be given to scrape ``/metrics`` with (``PALIMPSEST_METRICS_TOKEN``).
METRICS_TOKEN = "scrape-" + uuid4().hex


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, dict[str, str]]]:
    served = Served(tmp_path_factory.mktemp("workers"))
    served.extra = {"PALIMPSEST_API_WORKERS": "2", "PALIMPSEST_METRICS_TOKEN": METRICS_TOKEN}
    started = served.start()
    yield served, started
    served.close()


def workers(served: Served) -> list[psutil.Process]:
    """The live HTTP workers of ``served`` (one killed is a zombie until serve reaps it)."""
    assert served.process is not None
    found = []
    for child in psutil.Process(served.process.pid).children():
        try:
            if "api-worker" in child.cmdline():
                found.append(child)
        except psutil.Error:
            continue
    return found


def answered_by(served: Served, client: httpx.Client, url: str) -> int:
    """The pid of the worker holding ``client``'s connection (asked once over it)."""
    client.get(url + "/health").raise_for_status()
    port = {c.laddr.port for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == int(url.rsplit(":", 1)[1])}
    for worker in workers(served):
        if any(c.raddr and c.raddr.port in port for c in worker.net_connections("tcp")):
            return worker.pid
    raise AssertionError("no worker holds the connection")


def person() -> str:
    return f"p-{uuid4().hex[:8]}"


def lives_in(client: Client, who: str, city: str) -> dict[str, Any]:
    return client.remember(kind="state", memory_type="fact", subject=who, label="address",
                           content=city)


def test_both_workers_take_connections(two: tuple[Served, dict[str, str]]) -> None:
    served, started = two
    assert len(workers(served)) == 2
    seen: set[int] = set()
    for _ in range(200):
        with httpx.Client(timeout=10) as client:  # a new connection each time
            seen.add(answered_by(served, client, started["url"]))
        if len(seen) == 2:
            break
    assert seen == {w.pid for w in workers(served)}


def health_checks_counted(url: str) -> float:
    """``GET /health`` answered 200, as ``/metrics`` counts them, over a new connection."""
    from prometheus_client.parser import text_string_to_metric_families

    with httpx.Client(timeout=10, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}) as client:
        text = client.get(url + "/metrics").raise_for_status().text
    for family in text_string_to_metric_families(text):
        if family.name == "palimpsest_http_request_seconds":
            return sum(sample.value for sample in family.samples
                       if sample.name.endswith("_count") and sample.labels.get("endpoint") == "/health"
                       and sample.labels.get("status") == "200")
    return 0.0


def test_metrics_sum_the_requests_every_worker_answered(two: tuple[Served, dict[str, str]]) -> None:
    served, started = two
    assert httpx.get(started["url"] + "/metrics", timeout=10).status_code == 401  # not public
    before = max(health_checks_counted(started["url"]) for _ in range(4))
    seen: set[int] = set()
    for _ in range(40):  # one /health each, over connections the workers share out
        with httpx.Client(timeout=10) as client:
            seen.add(answered_by(served, client, started["url"]))
    assert len(seen) == 2
    after = [health_checks_counted(started["url"]) for _ in range(6)]  # whichever worker answers
    assert min(after) >= before + 40


def test_a_write_is_read_through_another_connection_with_its_position(
        two: tuple[Served, dict[str, str]]) -> None:
    _, started = two
    with Client(started["url"], started["key"], timeout=30) as client:
        wait_ready(client)
    for number in range(12):
        who = person()
        with Client(started["url"], started["key"], timeout=30) as writer:
            written = lives_in(writer, who, f"Town {number}")
        with Client(started["url"], started["key"], timeout=30) as reader:  # maybe the other one
            found = reader.search(f"where does {who} live?", subjects=[who],
                                  min_position=written["position"])
            assert found["freshness"]["stale_by"] == 0
            assert values(found)[:1] == [f"Town {number}"], found
            facts = reader.facts(who, min_position=written["position"])["facts"]
            assert [f["value"] for f in facts] == [f"Town {number}"]


def test_a_console_session_is_good_on_every_worker(two: tuple[Served, dict[str, str]]) -> None:
    served, started = two
    url = started["url"]
    with httpx.Client(base_url=url, timeout=30) as first:
        form = first.get("/console/sign-in")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token, form.text
        signed = first.post("/console/sign-in", data={"key": started["key"],
                                                      "csrf_token": token.group(1)})
        assert signed.status_code == 303 and signed.headers["location"].endswith("/arbitration")
        cookie = first.cookies.get("palimpsest_console")
        assert cookie
        signer = answered_by(served, first, url)
    others = 0
    for _ in range(100):
        with httpx.Client(base_url=url, timeout=30, cookies={"palimpsest_console": cookie}) as other:
            if answered_by(served, other, url) == signer:
                continue
            page = other.get("/console/arbitration", follow_redirects=False)
            assert page.status_code == 200, page.text[:500]
            others += 1
            break
    assert others == 1, "no connection reached the other worker"


def test_a_console_sign_out_on_one_worker_is_refused_on_the_other(
        two: tuple[Served, dict[str, str]]) -> None:
    served, started = two
    url = started["url"]
    with httpx.Client(base_url=url, timeout=30) as first:
        form = first.get("/console/sign-in").text
        first.post("/console/sign-in", data={"key": started["key"], "csrf_token": csrf_of(form)})
        cookie = first.cookies.get("palimpsest_console")
        assert cookie
        page = first.get("/console/operations", follow_redirects=False)
        assert page.status_code == 200, page.text[:500]
        out = first.post("/console/sign-out", data={"csrf_token": csrf_of(page.text)},
                         follow_redirects=False)
        assert out.status_code == 303
        signer = answered_by(served, first, url)
    refused = set()
    for _ in range(100):  # the cookie replayed, until both workers have refused it
        with httpx.Client(base_url=url, timeout=30, cookies={"palimpsest_console": cookie}) as other:
            worker = answered_by(served, other, url)
            page = other.get("/console/operations", follow_redirects=False)
            assert page.status_code == 303 and page.headers["location"].endswith("/sign-in")
            refused.add(worker)
        if len(refused) == 2:
            break
    assert signer in refused and len(refused) == 2, "no connection reached the other worker"


def csrf_of(page: str) -> str:
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token, page[:500]
    return token.group(1)


def test_mcp_answers_whichever_worker_takes_each_request(two: tuple[Served, dict[str, str]]) -> None:
    _, started = two
    who = person()

    async def scenario() -> list[str]:
        async with http_session(started["mcp"], started["key"]) as session:
            written = await call(session, "remember", {
                "kind": "state", "memory_type": "fact", "subject": who, "label": "address",
                "content": "Nara"})
            found = []
            for _ in range(6):  # each request may go to either worker
                answer = await call(session, "get_facts", {"subject": who,
                                                           "min_position": written["position"]})
                found += [f["value"] for f in answer["facts"]]
            return found

    assert anyio.run(scenario) == ["Nara"] * 6


def test_a_killed_worker_is_started_again_and_loses_no_write(
        two: tuple[Served, dict[str, str]]) -> None:
    served, started = two
    who, accepted = person(), []
    with Client(started["url"], started["key"], timeout=30) as client:
        for number in range(5):
            accepted.append(lives_in(client, f"{who}-{number}", "Before"))
    victim, *_ = workers(served)
    victim.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # the other worker answers meanwhile: a new connection for each write
        try:
            with Client(started["url"], started["key"], timeout=30) as client:
                accepted.append(lives_in(client, f"{who}-{len(accepted)}", "After"))
        except Exception:  # a connection the dying worker held
            pass
        alive = [w for w in workers(served) if w.pid != victim.pid and w.is_running()]
        if len(alive) == 2 and len(accepted) >= 10:
            break
        assert time.monotonic() < deadline, "the killed worker was not started again"
        time.sleep(0.2)
    with Client(started["url"], started["key"], timeout=30) as client:
        for number, written in enumerate(accepted):
            facts = client.facts(f"{who}-{number}", min_position=written["position"])["facts"]
            assert [f["value"] for f in facts] == ["Before" if number < 5 else "After"]


def test_sigterm_stops_every_worker(tmp_path: Path) -> None:
    served = Served(tmp_path)
    served.extra = {"PALIMPSEST_API_WORKERS": "2", "PALIMPSEST_METRICS_TOKEN": METRICS_TOKEN}
    try:
        served.start("--no-mcp")
        pids = [w.pid for w in workers(served)]
        assert len(pids) == 2
        code, took = served.stop()
        assert code == 0 and took < STOP_SECONDS, (code, took, served.err())
        assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                       for pid in pids), "a worker was left running"
        assert "Traceback" not in served.err(), served.err()
    finally:
        served.close()
