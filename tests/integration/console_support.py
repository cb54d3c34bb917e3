"""What the console's browser tests share: a real ``palimpsest serve`` on the embedded default
(its own PostgreSQL and broker in a temporary folder), keys made as an operator makes them, and
Debian's Chromium driven by Playwright (no browser download: ``executable_path`` is the system's).

    # the fixtures are the integration suite's (tests/integration/conftest.py): defined once, so
    # the session holds one server and one browser whichever modules use them
    def test_something(console, page):
        key = console.new_key()                 # a new tenant's key with every scope
        sign_in(page, console.url, key)
        page.goto(console.url + "/console/timeline")
        shoot(page, "timeline")                 # console-screenshots/timeline-1280x800.png, -390x844

* ``console`` (session): :class:`Console` — ``url``, ``new_key(tenant=None, *scopes)``,
  ``client(key)`` (a ``palimpsest_client.Client``), ``llm`` (the fake OpenAI-compatible server the
  ingest worker calls; it answers 500 unless scripted, so an ingested turn is dead-lettered).
  One server for the whole session, shared by every module that uses the fixture.
* ``browser`` (module): Chromium; ``page`` (each test): a new context at 1280×800 whose console
  errors and uncaught exceptions go to ``console_errors``; the test fails at teardown if any is
  left there (a test that expects one — a 401 page — clears it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from palimpsest_client import APIError, Client

from tests.fakes.openai_server import FakeOpenAIServer, Reply

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "console-screenshots"
ALL_SCOPES = ("memory:read", "memory:write", "memory:admin", "memory:erase")
SIZES = ((1280, 800), (390, 844))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@dataclass
class Console:
    """A running ``palimpsest serve``: where it answers, and how to make keys for it."""

    url: str
    data: Path
    llm: FakeOpenAIServer
    keys: dict[str, str] = field(default_factory=dict)

    def new_key(self, tenant: str | None = None, *scopes: str, name: str = "console test") -> str:
        """A new key (of a new tenant unless named) with ``scopes`` (all of them by default),
        made by ``palimpsest keys create`` in the server's data folder."""
        tenant = tenant or "t-" + uuid4().hex[:12]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")}
        env["PALIMPSEST_DATA_DIR"] = str(self.data)
        flags = [arg for scope in (scopes or ALL_SCOPES) for arg in ("--scope", scope)]
        done = subprocess.run([sys.executable, "-m", "services.entrypoints.cli", "keys", "create",
                               "--tenant", tenant, *flags, "--name", name, "--json"],
                              env=env, capture_output=True, text=True, timeout=120, check=True)
        secret = str(json.loads(done.stdout)["secret"])
        self.keys[secret] = tenant
        return secret

    def client(self, key: str) -> Client:
        return Client(self.url, key)


_shared: dict[str, Any] = {}


@pytest.fixture(scope="session")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """One ``palimpsest serve`` for the session (every module importing this fixture shares it):
    consolidation scans every second; the ingest worker calls ``llm`` with no retry."""
    if not _shared:
        from tests.integration.test_serve import Served, wait_ready

        llm = FakeOpenAIServer().__enter__()
        llm.default_reply = Reply.error(500)
        served = Served(tmp_path_factory.mktemp("console"))
        served.extra = {"PALIMPSEST_LLM_BASE_URL": llm.base_url, "PALIMPSEST_LLM_MODEL": "scripted",
                        "PALIMPSEST_LLM_RETRIES": "0", "PALIMPSEST_LLM_BACKOFF_SECONDS": "0.01",
                        "PALIMPSEST_CONSOLIDATION_INTERVAL_SECONDS": "1"}
        try:
            started = served.start("--no-mcp")
            made = Console(started["url"], served.data, llm)
            wait_ready(made.client(made.new_key()))
        except BaseException:
            served.close()
            llm.__exit__(None, None, None)
            raise
        _shared.update(console=made, served=served, users=0)
    _shared["users"] += 1
    try:
        yield _shared["console"]
    finally:
        _shared["users"] -= 1
        if not _shared["users"]:
            served = _shared["served"]
            if served.process is not None and served.process.poll() is None:
                served.stop()  # SIGTERM: serve stops its servers itself
            served.close()
            _shared["console"].llm.__exit__(None, None, None)
            _shared.clear()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright (never a downloaded browser), for one module: while
    Playwright's sync driver runs, its event loop holds this thread, and every later test that
    runs a loop of its own (MCP, async clients) would find it there."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("no chromium on PATH: apt-get install chromium (.ci/run does)")
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def console_errors() -> list[str]:
    """The browser console's errors and the page's uncaught exceptions, as they come."""
    return []


@pytest.fixture
def page(browser: Any, console_errors: list[str]) -> Iterator[Any]:
    """A fresh browser context (no cookie) at 1280×800; no console error may be left at the end."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    opened.on("console", lambda m: console_errors.append(f"console: {m.text} ({opened.url})")
              if m.type == "error" else None)
    opened.on("pageerror", lambda e: console_errors.append(f"pageerror: {e} ({opened.url})"))
    try:
        yield opened
    finally:
        context.close()
    assert console_errors == [], "errors in the browser console"


def sign_in(page: Any, url: str, key: str) -> None:
    """Sign in through the form; on the arbitration page once it succeeds."""
    page.goto(url + "/console/sign-in")
    page.get_by_test_id("key-input").fill(key)
    page.get_by_test_id("sign-in").click()
    page.wait_for_url("**/console/arbitration")


def shoot(page: Any, name: str) -> list[Path]:
    """Screenshots of the page as it is, at 1280×800 and at a phone's 390×844, into
    ``console-screenshots/`` at the repository's root; the viewport is put back."""
    SHOTS.mkdir(exist_ok=True)
    before = page.viewport_size
    written = []
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        path = SHOTS / f"{name}-{width}x{height}.png"
        page.screenshot(path=str(path), full_page=True)
        written.append(path)
    page.set_viewport_size(before)
    return written


def eventually(probe: Callable[[], Any], timeout: float = 60.0, every: float = 0.2) -> Any:
    """``probe()`` once it answers truthy (the read models follow the log within moments)."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            found = probe()
        except (APIError, AssertionError) as error:
            found, last = None, error
        if found:
            return found
        assert time.monotonic() < deadline, f"not so within {timeout} s (last: {last!r})"
        time.sleep(every)
