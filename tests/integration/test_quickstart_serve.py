"""The README's quick start, run as a user runs it: ``palimpsest serve`` on the embedded default
prints what the README shows, then the README's ``curl`` and its Python client example run
against it, and what the example prints is what its comments say."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from palimpsest_client import Client

from tests.integration.test_serve import STOP_SECONDS, Served, projected

pytestmark = pytest.mark.integration

README = Path(__file__).parents[2] / "README.md"
DEFAULT_URL = "http://127.0.0.1:8765"


def quick_start(readme: str) -> str:
    section = readme.split("## Quick start", 1)[1]
    return section.split("\n## ", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    return [block.split("```", 1)[0] for block in text.split(f"```{language}\n")[1:]]


def expected_output(example: str) -> list[str]:
    """What the example's ``print(…)  # …`` lines say they print, in order."""
    return [line.rsplit("# ", 1)[1].strip() for line in example.splitlines()
            if line.strip().startswith("print(") and "# " in line]


@pytest.fixture
def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    made = Served(tmp_path)
    yield made
    made.close()


def test_the_readme_quick_start_runs_against_serve(served: Served, tmp_path: Path) -> None:
    section = quick_start(README.read_text())
    (shown,) = [b for b in blocks(section, "") if "Palimpsest is serving" in b]
    (shell,) = [b for b in blocks(section, "sh") if "curl" in b]
    (example,) = [b for b in blocks(section, "python") if "palimpsest_client" in b]
    assert "make serve" in blocks(section, "sh")[0] and "make test" in blocks(section, "sh")[0]

    started = served.start()
    printed = served.out()
    for line in shown.strip().splitlines():  # the same lines, up to the port, the key and its id
        head = re.split(r"http://|pk_|key_|\.palimpsest/", line)[0].rstrip()
        assert head in printed, f"{head!r} is not printed:\n{printed}"
    url = started["url"]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")},
           "PALIMPSEST_URL": url, "PALIMPSEST_KEY": started["key"]}

    curl = shell.replace(DEFAULT_URL, url).replace("export PALIMPSEST_KEY=pk_…", "")
    done = subprocess.run(["bash", "-euc", curl], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and '"outcome":"remembered"' in done.stdout, done.stderr + done.stdout
    with Client(url, started["key"]) as client:  # a user takes a while to type the next step
        projected(client, json.loads(done.stdout)["position"])

    run = subprocess.run([sys.executable, "-c", example], env=env, capture_output=True, text=True,
                         timeout=120, check=False, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines() == expected_output(example), run.stdout

    code, took = served.stop(signal.SIGINT)
    assert code == 0 and took < STOP_SECONDS, (code, took, served.err())
