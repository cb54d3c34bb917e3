"""The README's quick start, run as a user runs it: ``palimpsest demo`` on the embedded default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_demo_prints_every_slot_with_both_timelines(tmp_path: Path) -> None:
    env = {**os.environ, "PALIMPSEST_DATA_DIR": str(tmp_path / "data")}
    env.pop("PALIMPSEST_PERSISTENCE", None)
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "demo"], env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "on the embedded PostgreSQL" in out
    assert "current: 'Kaohsiung'" in out
    assert "Overwritten  'Senior engineer' (same_turn)" in out
    assert "queued (high frequency: 3 changes in the trailing 30 days)" in out
    assert "launch_date: current '2026-11-20' vs proposed '2026-11-22'" in out
    assert "due 2026-10-01: expired" in out
    assert "corrected from 'Kickof meeting" in out
    assert "tags ['json web token', '后端', '资料库']" in out
    assert (tmp_path / "data" / "pg" / "PG_VERSION").exists()


def test_errors_are_reported_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PALIMPSEST_PERSISTENCE": "memory", "PALIMPSEST_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", "nonsense"], env=env, capture_output=True,
        text=True, timeout=60, check=False,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr


def test_the_readme_python_example_runs(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    example = readme.split("```python\n", 1)[1].split("```\n", 1)[0]
    env = {**os.environ, "PALIMPSEST_DATA_DIR": str(tmp_path / "data")}
    env.pop("PALIMPSEST_PERSISTENCE", None)
    done = subprocess.run(
        [sys.executable, "-c", example], env=env, capture_output=True, text=True, timeout=300,
        check=False, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
