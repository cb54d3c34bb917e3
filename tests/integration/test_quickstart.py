"""``palimpsest demo`` as a user runs it on the embedded default: its history written through the REST
client to a server in its own process, projected through the relay, Kafka and Faust; and the
in-process Python examples of the documentation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_examples import Example, Outcome, blocks

pytestmark = pytest.mark.integration


def test_demo_prints_every_slot_with_both_timelines(tmp_path: Path) -> None:
    env = {**os.environ, "PALIMPSEST_DATA_DIR": str(tmp_path / "data")}
    env.pop("PALIMPSEST_PERSISTENCE", None)
    done = subprocess.run(
        [sys.executable, "-m", "services.entrypoints.cli", "demo"], env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Starting palimpsest serve in this process (the embedded PostgreSQL in" in out
    assert "projected through the relay, Kafka and the Faust projector, every card embedded" in out
    assert "current: 'Kaohsiung'" in out
    assert "Overwritten  'Senior engineer' (same_turn)" in out
    assert "queued (high frequency: 3 changes in the trailing 30 days, this one included)" in out
    assert "launch_date: current '2026-11-20' vs proposed '2026-11-22'" in out
    assert "due 2026-10-01: expired" in out
    assert "corrected from 'Kickof meeting" in out
    assert "tags ['json web token', '后端', '资料库']" in out
    assert (tmp_path / "data" / "pg" / "PG_VERSION").exists()
    questions = out.split("Questions, asked on", 1)[1]
    current, as_of, week_zh, week_en, launch = questions.split("  ▸ ")[1:6]
    assert current.splitlines()[1].strip().startswith("1. Kaohsiung")
    assert as_of.splitlines()[1].strip().startswith("1. Kyoto")
    for answer in (week_zh, week_en):
        assert answer.splitlines()[1].strip().startswith("1. Gave a talk on PostgreSQL indexing")
    assert "⚠ pending arbitration on fibon/launch_date" in launch
    assert "<current_time>2026-10-31T09:00+08:00</current_time>" in launch


def test_errors_are_reported_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PALIMPSEST_PERSISTENCE": "memory", "PALIMPSEST_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "services.entrypoints.cli", "nonsense"], env=env, capture_output=True,
        text=True, timeout=60, check=False,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr


def _in_process_examples() -> list[tuple[str, str]]:
    """The documentation's Python examples of the in-process application: each opens a database
    of its own, so ``tests/docs_examples`` leaves them out (no-run) and they run here, each in a
    folder of its own. (where, code)"""
    found = []
    for page in sorted((Path(__file__).parents[2] / "docs").rglob("*.md")):
        for line, language, code, no_run in blocks(page):
            if language == "python" and no_run and "Settings(" in code:
                found.append((f"{page.name}:{line}", code))
    return found


@pytest.mark.parametrize("example", _in_process_examples(), ids=lambda e: e[0])
def test_the_in_process_examples_run(tmp_path: Path, example: tuple[str, str]) -> None:
    env = {**os.environ, "PALIMPSEST_DATA_DIR": str(tmp_path / "data")}
    env.pop("PALIMPSEST_PERSISTENCE", None)
    done = subprocess.run(
        [sys.executable, "-c", example[1]], env=env, capture_output=True, text=True, timeout=300,
        check=False, cwd=tmp_path,
    )
    outcome = Outcome(Example(tmp_path / example[0], 1, "python", example[1]), 1, done.returncode,
                      done.stdout + "\n" + done.stderr)
    assert outcome.ok, outcome.report()  # it ran, and printed what its comments say


def test_there_are_in_process_examples() -> None:
    assert len(_in_process_examples()) >= 2
