"""Keeping a process's parts up, and stopping them all in time.

* :class:`BrokerKeeper` keeps the data folder's embedded broker up at its one address while this
  process runs: a broker it owns is restarted when it exits or stops answering (reaped, on the same
  port, with backoff); one another process owns is taken over when that process is gone.
* :class:`Shutdown` turns SIGINT and SIGTERM into a stop event, and forces the exit when a clean
  stop takes longer than its deadline (a hung broker or database can block a client for minutes):
  the servers this process started are stopped first.
* :func:`quiet_kafka_logs`: the Kafka clients log every failed connection attempt (about 90 lines a
  second while a broker is down); a repeated line is let through once per window. The parts log
  their own changes of state, once each.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from infra.broker import BrokerError, EmbeddedBroker, ping
from infra.broker_folder import folder_lock, process_alive, read_running, start_in_folder

log = logging.getLogger(__name__)


class BrokerKeeper:
    """A thread that keeps the data folder's embedded broker up (see the module docstring).

    ``broker`` is the broker this process started (None when it joined another process's);
    ``on_ready(bootstrap)`` runs after every (re)start, e.g. to create the topic before a client
    writes to it (tansu would create it with its own partition count)."""

    def __init__(
        self, folder: Path, broker: EmbeddedBroker | None, *,
        on_ready: Callable[[str], None] | None = None, interval: float = 0.25,
        ping_every: float = 2.0, unanswered: int = 3, takeover_after: float = 10.0,
        max_backoff: float = 10.0,
    ) -> None:
        self.folder = Path(folder).resolve()
        self.broker = broker
        running = read_running(self.folder)
        self.bootstrap = broker.bootstrap if broker is not None else (
            running.bootstrap if running is not None else "")
        self.on_ready = on_ready
        self.interval, self.ping_every, self.unanswered = interval, ping_every, unanswered
        self.takeover_after, self.max_backoff = takeover_after, max_backoff
        #: Times this process started the broker again.
        self.restarts = 0
        #: When it was last seen up (wall clock, for heartbeats).
        self.last_seen: float | None = time.time()
        self._down_since: float | None = None
        self._backoff, self._next_try, self._misses, self._pinged = 0.0, 0.0, 0, time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def owner(self) -> bool:
        return self.broker is not None

    @property
    def alive(self) -> bool:
        return self._down_since is None

    def start(self) -> BrokerKeeper:
        self._thread = threading.Thread(target=self._run, name="broker-keeper", daemon=True)
        self._thread.start()
        return self

    def hold(self) -> None:
        """Stop watching (while the process stops: no restart any more); the broker keeps running."""
        self._stop.set()

    def stop(self, timeout: float = 0.5) -> None:
        """Stop watching and stop the broker this process owns (SIGKILL after ``timeout``)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=3.0)
        if self.broker is not None:
            self.broker.stop(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:  # never let the keeper die: log it, try again at the next turn
                log.exception("broker keeper: unexpected error")
                self._stop.wait(1.0)

    def check(self) -> None:
        """One turn: find out whether the broker is up, and act if it is not."""
        trouble = self._own_trouble() if self.broker is not None else self._joined_trouble()
        if trouble is None:
            self._up()
            return
        self._down(trouble)
        if time.monotonic() >= self._next_try and not self._stop.is_set():
            self._recover()

    def _own_trouble(self) -> str | None:
        assert self.broker is not None
        code = self.broker.exit_code
        if code is not None:
            name = f" ({signal.Signals(-code).name})" if code < 0 and -code in signal.valid_signals() else ""
            return f"exited with code {code}{name}"
        if not self.broker.running:
            return "is not running"
        if time.monotonic() - self._pinged >= self.ping_every:
            self._pinged = time.monotonic()
            self._misses = 0 if ping(self.bootstrap, timeout=1.5) else self._misses + 1
            if self._misses >= self.unanswered:
                return f"has not answered for {self._misses * self.ping_every:.0f} s"
        return None

    def _joined_trouble(self) -> str | None:
        running = read_running(self.folder)
        if running is not None and running.alive():
            self.bootstrap = running.bootstrap
            return None
        owner_gone = running is None or running.owner is None or not process_alive(running.owner)
        if owner_gone or (self._down_since is not None
                          and time.monotonic() - self._down_since >= self.takeover_after):
            return "is gone with the process that ran it" if owner_gone else "was not restarted"
        return None  # its owner is restarting it

    def _down(self, trouble: str) -> None:
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        pid = self.broker.pid if self.broker is not None else None
        log.warning("embedded Kafka broker at %s%s %s; %s", self.bootstrap,
                    f" (pid {pid})" if pid else "", trouble,
                    "restarting it" if self.broker is not None else "taking it over")

    def _up(self) -> None:
        self.last_seen = time.time()
        if self._down_since is None:
            return
        log.warning("embedded Kafka broker back at %s%s after %.1f s", self.bootstrap,
                    f" (pid {self.broker.pid})" if self.broker is not None else "",
                    time.monotonic() - self._down_since)
        self._down_since, self._backoff, self._next_try, self._misses = None, 0.0, 0.0, 0

    def _recover(self) -> None:
        try:
            with folder_lock(self.folder):
                if self._stop.is_set():
                    return
                self._restart_own() if self.broker is not None else self._take_over()
        except (BrokerError, OSError) as error:
            first = self._backoff == 0.0
            self._backoff = min(max(self._backoff * 2, 0.5), self.max_backoff)
            self._next_try = time.monotonic() + self._backoff
            (log.warning if first else log.debug)(
                "embedded Kafka broker at %s did not start: %s; retrying with backoff (up to every "
                "%.0f s)", self.bootstrap, error, self.max_backoff)
            return
        self.restarts += 1
        self._ready()
        self._up()

    def _restart_own(self) -> None:
        assert self.broker is not None
        self.broker.kill()  # reaped; a hung broker is killed first
        self.bootstrap = self.broker.start(self.broker.port)

    def _take_over(self) -> None:
        running = read_running(self.folder)
        if running is not None and running.alive():  # its owner came back meanwhile
            self.bootstrap = running.bootstrap
            return
        self.broker = start_in_folder(self.folder)
        self.bootstrap = self.broker.bootstrap

    def _ready(self) -> None:
        if self.on_ready is None or self.broker is None:
            return
        try:
            self.on_ready(self.bootstrap)
        except Exception as error:  # the relay creates the topic too, on its next check
            log.warning("embedded Kafka broker at %s: set-up failed: %s", self.bootstrap, error)


class Shutdown:
    """SIGINT / SIGTERM set :attr:`stop` and run the :meth:`on_stop` hooks (quick, non-blocking:
    they run in the signal handler); if the process has not called :meth:`done` within
    ``deadline`` seconds, the :meth:`on_force` hooks run (stop the servers this process started)
    and the process exits. A second signal forces the exit at once."""

    def __init__(self, deadline: float = 3.5, name: str = "process",
                 stop: threading.Event | None = None) -> None:
        self.deadline = deadline
        self.name = name
        self.stop = stop or threading.Event()
        #: The signal that asked for the stop, if one did.
        self.signal: int | None = None
        self._on_stop: list[Callable[[], None]] = []
        self._on_force: list[Callable[[], None]] = []
        self._timer: threading.Timer | None = None

    def install(self) -> Shutdown:
        """Handle SIGINT and SIGTERM (from the main thread; elsewhere a no-op)."""
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, self._on_signal)
        return self

    def on_stop(self, hook: Callable[[], None]) -> None:
        self._on_stop.append(hook)

    def on_force(self, hook: Callable[[], None]) -> None:
        self._on_force.append(hook)

    def _on_signal(self, signum: int, _frame: object) -> None:
        """The stop is asked from a thread of its own: the handler runs on the main thread, which
        may hold :attr:`stop`'s lock at that moment (inside ``stop.wait``), and setting the event
        here would then wait for itself forever (an event's lock is not reentrant). Waited for a
        moment, so that a stop asked from a main thread not waiting is set when the handler
        returns."""
        asking = threading.Thread(target=self.request, args=(signal.Signals(signum).name, signum),
                                  name=f"{self.name} stop", daemon=True)
        asking.start()
        asking.join(0.5)

    def request(self, reason: str, signum: int | None = None) -> None:
        """Ask everything to stop; the clock of the deadline starts now."""
        if self.stop.is_set():
            if signum is not None:
                log.warning("%s: %s again: stopping now", self.name, reason)
                self.force()
            return
        self.signal = signum
        self.stop.set()
        log.warning("%s: %s: stopping (at most %.0f s)", self.name, reason, self.deadline + 1)
        self._timer = threading.Timer(self.deadline, self._late)
        self._timer.daemon = True
        self._timer.start()
        for hook in self._on_stop:
            try:
                hook()
            except Exception:
                log.exception("%s: a stop hook failed", self.name)

    def done(self) -> None:
        """The clean stop finished: no forced exit."""
        if self._timer is not None:
            self._timer.cancel()

    def _late(self) -> None:
        log.error("%s: not stopped within %.1f s: forcing the exit", self.name, self.deadline)
        self.force()

    def force(self) -> None:
        """Run the :meth:`on_force` hooks (at most about a second in all) and exit the process."""
        threading.Timer(1.0, os._exit, args=(1,)).start()
        for hook in self._on_force:
            try:
                hook()
            except Exception:
                log.exception("%s: a forced-stop hook failed", self.name)
        logging.shutdown()
        os._exit(1)


class _Throttle(logging.Handler):
    """Hands a library's records to the root logger's handlers, each distinct line at most once per
    ``window`` seconds (the first time at once)."""

    def __init__(self, window: float) -> None:
        super().__init__()
        self.window = window
        self._seen: dict[tuple[str, object], float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        key, now = (record.name, record.msg), time.monotonic()
        if now - self._seen.get(key, -self.window) < self.window:
            return
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = now
        record.exc_info, record.exc_text, record.stack_info = None, None, None  # one line, no trace
        logging.getLogger().handle(record)


def quiet_kafka_logs(window: float = 300.0,
                     loggers: tuple[str, ...] = ("kafka", "aiokafka", "faust", "mode")) -> None:
    """Let each distinct line of the Kafka clients' (and Faust's) loggers through once per ``window``
    seconds, without its traceback."""
    for name in loggers:
        library = logging.getLogger(name)
        if not any(isinstance(h, _Throttle) for h in library.handlers):
            library.addHandler(_Throttle(window))
        library.propagate = False
