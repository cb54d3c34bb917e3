"""A job ``serve`` runs on a thread of its own every so many seconds, until stopped."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.postgres import Lease


class Periodic:
    """Runs :meth:`tick` every ``interval`` seconds on a daemon thread named ``name``, the first
    time ``first`` seconds after :meth:`start` (the interval when None: a starting service has
    better things to do with its cores), until :meth:`stop`. ``stopping`` may be shared with
    the rest of the process, so one stop ends them all. With a ``lease``, only while this
    process holds it: of several processes on one database, one runs the job."""

    name = "periodic"

    def __init__(self, interval: float, stop: threading.Event | None = None,
                 first: float | None = None, lease: Lease | None = None) -> None:
        self.interval = interval
        self.first = interval if first is None else min(first, interval)
        self.stopping = stop or threading.Event()
        self.lease = lease
        self._thread: threading.Thread | None = None

    def tick(self) -> object:
        raise NotImplementedError

    def run(self) -> None:
        wait = self.first
        try:
            while not self.stopping.wait(wait):
                if self.lease is None or self.lease.held():
                    self.tick()
                wait = self.interval
        finally:
            if self.lease is not None:
                self.lease.release()

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
