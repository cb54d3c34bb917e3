"""A stop asked by a signal while the main thread holds the stop event's lock (it is inside
``stop.wait``, as serve's supervision and every HTTP worker are most of the time) still stops the
process: the handler does not set the event itself, whose lock is not reentrant."""

from __future__ import annotations

import signal
import threading

from infra.supervision import Shutdown


def test_a_signal_while_the_stop_events_lock_is_held_stops_the_process() -> None:
    shutdown = Shutdown(deadline=60, name="test")
    returned = threading.Event()

    def main_thread() -> None:
        with shutdown.stop._cond:  # type: ignore[attr-defined] # as inside stop.wait()
            shutdown._on_signal(signal.SIGTERM, None)  # the handler, run on this thread
            returned.set()

    thread = threading.Thread(target=main_thread, daemon=True)
    thread.start()
    thread.join(5)
    try:
        assert returned.is_set(), "the handler waited for a lock its own thread held"
        assert shutdown.stop.wait(5) and shutdown.signal == signal.SIGTERM
    finally:
        shutdown.done()
