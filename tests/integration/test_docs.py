"""The documentation: the site builds with MkDocs in strict mode (a broken link or anchor fails
it), the README stays a short front page, and every code example of the README and the docs runs
against a real ``palimpsest serve`` twice in a row (``tests/docs_examples.py``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs_examples import ROOT, examples, run_twice, serving

pytestmark = pytest.mark.integration

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
#: The README is a front page: what it is, the two commands, a tour, where to read on.
README_MOST_LINES = 260


@pytest.fixture(scope="module")
def example_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with serving(tmp_path_factory.mktemp("docs-serve")) as env:
        yield env


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MOST_LINES
    for command in ("make serve", "make test"):
        assert command in text


def test_every_page_has_examples_to_run() -> None:
    """The runner finds the examples it should: a page that shows code runs some of it."""
    assert sum(len(examples(page)) for page in PAGES) >= 20
    assert examples(README)


@pytest.mark.parametrize("page", [p for p in PAGES if examples(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_of_a_page_runs_twice(page: Path, example_env: dict[str, str]) -> None:
    failed = [o for o in run_twice([page], example_env) if not o.ok]
    assert not failed, "\n\n".join(o.report() for o in failed)
