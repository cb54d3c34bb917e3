"""The HTTP workers' metric folder is named after the serving process, and the folders of serving
processes that died without removing theirs (a SIGKILL leaves them) go at the next start."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from services.entrypoints.api_workers import metrics_folder


def test_a_dead_servers_folder_goes_and_a_live_ones_stays(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = tmp_path / f"palimpsest-metrics-{int(gone.stdout)}-abc"
    live = tmp_path / f"palimpsest-metrics-{os.getppid()}-def"
    other = tmp_path / "unrelated"
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "histogram_1.db").write_bytes(b"x")

    made = Path(metrics_folder())

    assert not dead.exists()
    assert live.exists() and other.exists()
    assert made.parent == tmp_path and made.name.startswith(f"palimpsest-metrics-{os.getpid()}-")
