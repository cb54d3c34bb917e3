"""The embedded server's list of joined processes (pgserver's ``.handle_pids.json``): the dead
are dropped from it, and a list a killed process left cut short is emptied instead of failing
whoever reads it next (a stop of the server would otherwise never be sent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from infra.embedded_pg import drop_dead_handles


def test_dead_processes_leave_the_list_and_the_live_stay(tmp_path: Path) -> None:
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)
    handles = tmp_path / ".handle_pids.json"
    handles.write_text(json.dumps([os.getpid(), gone]))
    assert drop_dead_handles(tmp_path) == [gone]
    assert json.loads(handles.read_text()) == [os.getpid()]


def test_a_list_cut_short_is_emptied(tmp_path: Path) -> None:
    handles = tmp_path / ".handle_pids.json"
    for cut in ("", "[12, 3"):
        handles.write_text(cut)
        assert drop_dead_handles(tmp_path) == []
        assert json.loads(handles.read_text()) == []
