"""The long-running parts of ``palimpsest serve`` and ``palimpsest pipeline`` that run as child
processes — the projector, the extraction worker, the HTTP workers — each ``palimpsest <command>``
with the parent's settings in its environment, dying with its parent and started again with
backoff when it exits by itself."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from infra.broker import die_with_parent
from infra.heartbeats import Heartbeats
from infra.settings import Settings
from projections.faust_app import FAILED_EXIT

log = logging.getLogger(__name__)


class Child:
    """``palimpsest <command> <args>`` (the projector, the extraction worker, an HTTP worker) as a
    child process: dies with this process (Linux), restarted with backoff when it exits by
    itself. ``bootstrap``: the Kafka it is told to use; ``pass_fds``: the file descriptors it
    inherits (an HTTP worker's listening socket)."""

    def __init__(self, settings: Settings, bootstrap: str | None, beats: Heartbeats | None = None,
                 command: str = "project", name: str = "projector",
                 max_backoff: float = 30.0, args: Sequence[str] = (),
                 pass_fds: Sequence[int] = ()) -> None:
        self.env = settings_env(settings)
        if bootstrap is not None:
            self.env["PALIMPSEST_KAFKA_BOOTSTRAP"] = bootstrap
        self.command = command
        self.args = tuple(args)
        self.pass_fds = tuple(pass_fds)
        self.name = name
        self.beats = beats
        self.max_backoff = max_backoff
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._started_at = 0.0
        self._signalled: set[int] = set()

    def start(self, args: Sequence[str] = (), pass_fds: Sequence[int] = ()) -> None:
        """Start it (``args``, ``pass_fds``: for this start only, besides its own)."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.entrypoints.cli", self.command, *self.args, *args],
            env=self.env, stdin=subprocess.DEVNULL, start_new_session=True,
            pass_fds=(*self.pass_fds, *pass_fds),
            preexec_fn=die_with_parent())  # Ctrl-C reaches the parent only
        self.starts += 1
        self._started_at = time.monotonic()

    def supervise(self, stop: threading.Event) -> int:
        """Keep it running (started here unless it runs already) until ``stop``; its
        ``FAILED_EXIT`` ends the supervision with that code."""
        backoff = 1.0
        if self.process is None or self.process.poll() is not None:
            self.start()
        while not stop.wait(0.2):
            assert self.process is not None
            code = self.process.poll()
            if code is None:
                continue
            if code == FAILED_EXIT:
                log.critical("the %s cannot go on (exit code %d): stopping", self.name, code)
                return code
            if time.monotonic() - self._started_at > 60:
                backoff = 1.0
            log.warning("pipeline: the %s (pid %d) exited with code %d; starting it again in "
                        "%.0f s", self.name, self.process.pid, code, backoff)
            self._forget()
            if stop.wait(backoff):
                break
            backoff = min(backoff * 2, self.max_backoff)
            self.start()
        return 0

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM, once: a second one forces its exit), without waiting."""
        process = self.process
        if process is not None and process.poll() is None and process.pid not in self._signalled:
            self._signalled.add(process.pid)
            process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        self.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("pipeline: the %s did not stop within %.1f s: killing it", self.name, timeout)
            self.kill()

    def kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(5)
            self._forget()

    def _forget(self) -> None:
        """Its heartbeats say stopped at once (a killed child cannot say it)."""
        if self.beats is not None and self.process is not None:
            self.beats.mark_stopped(self.process.pid)


def settings_env(settings: Settings) -> dict[str, str]:
    """This process's environment, with the ``PALIMPSEST_*`` variables that make a child's
    ``Settings()`` equal ``settings`` (the others, e.g. ``PALIMPSEST_CACHE_DIR``, kept)."""
    env = dict(os.environ)
    for name in type(settings).model_fields:
        variable, value = f"PALIMPSEST_{name.upper()}", getattr(settings, name)
        for key in [k for k in env if k == variable or k.startswith(variable + "__")]:
            del env[key]
        if value is not None:
            env[variable] = _env_value(value)
    return env


def _env_value(value: Any) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value)
    return str(value)
