"""The README's quick start, run as a user runs it: ``palimpsest serve`` on the embedded default
prints what the README shows, answers with the key it printed, and stops at once on Ctrl-C. (The
README's examples themselves run in ``test_docs``.)"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from palimpsest_client import Client

from tests.docs_examples import fenced
from tests.integration.test_serve import STOP_SECONDS, Served, wait_ready

pytestmark = pytest.mark.integration

README = Path(__file__).parents[2] / "README.md"


@pytest.fixture
def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    made = Served(tmp_path)
    yield made
    made.close()


def test_serve_prints_what_the_readme_shows_and_answers_with_its_key(served: Served) -> None:
    section = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    found = [(language, code) for _, language, code, _ in fenced(section)]
    (shown,) = [code for language, code in found if "Palimpsest is serving" in code]
    assert any("make serve" in code and "make test" in code for _, code in found)

    started = served.start()
    printed = served.out()
    for line in shown.strip().splitlines():  # the same lines, up to the port, the key and its id
        head = re.split(r"http://|pk_|key_|\.palimpsest/", line)[0].rstrip()
        assert head in printed, f"{head!r} is not printed:\n{printed}"
    with Client(started["url"], started["key"]) as client:
        wait_ready(client)
        assert client.status()["tenant_id"] == "local"

    code, took = served.stop(signal.SIGINT)
    assert code == 0 and took < STOP_SECONDS, (code, took, served.err())

