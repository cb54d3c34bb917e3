"""The whole suite: when it ends, no server it started is left running."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import psutil
import pytest


def leftover_servers(root: Path, wait: float = 10.0) -> list[Any]:
    """The embedded PostgreSQL servers and tansu brokers whose data folder is inside ``root``,
    still running after ``wait`` seconds (a server stopped a moment ago takes a moment to exit)."""
    from infra.broker_folder import embedded_brokers
    from infra.embedded_pg import embedded_postmasters

    deadline = time.monotonic() + wait
    while True:
        found = embedded_postmasters(root) + embedded_brokers(root)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a server of its own (under its temporary folder) outlives it, and stop it."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None or factory._basetemp is None:  # no test made a temporary folder
        return
    left = leftover_servers(factory.getbasetemp())
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for process in left:
        with contextlib.suppress(psutil.Error):
            line = f"left running by the test suite: pid {process.pid} {' '.join(process.cmdline())}"
            if reporter is not None:
                reporter.write_line(line, red=True)
            process.kill()
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
