"""Latency breakers for the retrieval routes (DESIGN §3). Pure: the caller passes monotonic
seconds as ``now``.

A breaker protects answers from a *sick* route; it must not turn load into wrong answers. So:

- a route is sick when at least ``slow_samples`` (3) of its last ``window`` (10) latencies are over
  ``limit_ms`` (150 ms) — one slow sample (a cold start, a pause, a garbage collection) is not;
- a call that warmed the route up (its first, or one that loaded a model or a dictionary) is no
  sample;
- a sick route is not quarantined while the other routes are slowed alike (:class:`Breakers`):
  when the machine is busy every route is slower, and taking one out would only make the answer
  poorer; nor while the machine is overloaded (:func:`machine_load` at least ``busy_load``): a
  CPU-bound route is slowed by load far more than routes that wait on the database, so "alike"
  alone does not see it;
- quarantine lasts ``quarantine_s`` (10 minutes); one probe call every ``probe_every_s`` (30 s)
  is let through, and a probe under the limit lets the route back in at once, with a fresh window.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import deque
from collections.abc import Callable, Iterable, Mapping


def nearest_rank(samples: Iterable[float], quantile: float = 0.95) -> float:
    """The nearest-rank percentile: the ceil(quantile·n)-th smallest sample (1-based, at least the 1st).

    Over 10 samples P95 is the 10th smallest, i.e. the slowest one: ceil(9.5) = 10. Over 20 it is the 19th.
    """
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("a percentile needs at least one sample")
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must lie in (0, 1], got {quantile}")
    rank = max(1, math.ceil(round(quantile * len(ordered), 9)))  # round: 0.95·20 must give 19, not 20
    return ordered[rank - 1]


#: Samples a route's usual latency is judged on: its slowdown is its recent median over this.
HISTORY = 100
#: Routes this much slower than usual are slowed: a busy machine, when most of them are.
SLOWED = 1.5


class RouteBreaker:
    """One route's window of latencies, and its quarantine."""

    def __init__(self, window: int = 10, limit_ms: float = 150.0, quarantine_s: float = 600.0,
                 probe_every_s: float = 30.0, slow_samples: int = 3) -> None:
        if window < 1:
            raise ValueError("the window holds at least one sample")
        if not 1 <= slow_samples <= window:
            raise ValueError("slow_samples lies between 1 and the window")
        self.limit_ms = limit_ms
        self.quarantine_s = quarantine_s
        self.probe_every_s = probe_every_s
        self.slow_samples = slow_samples
        self._samples: deque[float] = deque(maxlen=window)
        self._history: deque[float] = deque(maxlen=HISTORY)
        self._until: float | None = None  # end of the quarantine, None when the route is in
        self._last_probe = 0.0

    @property
    def samples(self) -> tuple[float, ...]:
        return tuple(self._samples)

    def p95(self) -> float | None:
        """The window's percentile, or None while it is empty."""
        return nearest_rank(self._samples) if self._samples else None

    def slow(self) -> int:
        """How many samples of the window are over the limit."""
        return sum(1 for sample in self._samples if sample > self.limit_ms)

    def sick(self) -> bool:
        return self.slow() >= self.slow_samples

    def slowdown(self) -> float:
        """The median of the latest ``slow_samples`` calls over the route's usual (longer-run
        median) latency: 1 as usual, 3 three times slower; 1 with no samples."""
        if not self._samples:
            return 1.0
        latest = list(self._samples)[-self.slow_samples:]
        usual = statistics.median(self._history)
        return statistics.median(latest) / usual if usual > 0 else 1.0

    def quarantined(self, now: float) -> bool:
        if self._until is not None and now >= self._until:
            self._rejoin()
        return self._until is not None

    def allow(self, now: float) -> bool:
        """May the route run now? Always while it is in; one probe per interval while quarantined."""
        if not self.quarantined(now):
            return True
        if now - self._last_probe >= self.probe_every_s:
            self._last_probe = now
            return True
        return False

    def record(self, latency_ms: float, now: float) -> None:
        """One call's latency; a call that failed or timed out counts as its whole budget. A
        quarantined route's call is a probe: under the limit, the route rejoins."""
        if self.quarantined(now):
            if latency_ms <= self.limit_ms:
                self._rejoin()
            return
        self._samples.append(latency_ms)
        self._history.append(latency_ms)

    def trip(self, now: float) -> None:
        self._until = now + self.quarantine_s
        self._last_probe = now

    def _rejoin(self) -> None:
        self._until = None
        self._samples.clear()


def machine_load() -> float:
    """How loaded the machine is, per core: the tasks runnable now (Linux's ``/proc/loadavg``,
    this process's caller excluded) or the 1-minute load average, whichever is higher."""
    cores = os.cpu_count() or 1
    try:
        with open("/proc/loadavg") as loadavg:
            fields = loadavg.read().split()
        running = int(fields[3].split("/")[0]) - 1
        return max(running, float(fields[0])) / cores
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0] / cores
        except OSError:  # not measurable here: never busy on its account
            return 0.0


class Breakers:
    """The breakers of every route of one retriever, which judge together: a sick route is taken
    out only when the others are not slowed alike (their median slowdown is under
    ``alike`` times its own)."""

    def __init__(self, names: Iterable[str], alike: float = 0.5,
                 load: Callable[[], float] | None = None, busy_load: float = 1.0,
                 **options: float) -> None:
        self.alike = alike
        #: The machine's load per core (:func:`machine_load`); None: not looked at.
        self.load, self.busy_load = load, busy_load
        self.routes: dict[str, RouteBreaker] = {name: RouteBreaker(**options) for name in names}  # type: ignore[arg-type]

    def __getitem__(self, name: str) -> RouteBreaker:
        return self.routes[name]

    def allow(self, name: str, now: float) -> bool:
        return self.routes[name].allow(now)

    def record(self, name: str, latency_ms: float, now: float, warm_up: bool = False) -> bool:
        """Record a call's latency (a warm-up call is none); True when the route was taken out."""
        breaker = self.routes[name]
        if warm_up:
            return False
        breaker.record(latency_ms, now)
        if breaker.quarantined(now) or not breaker.sick() or self.busy(name):
            return False
        breaker.trip(now)
        return True

    def busy(self, name: str) -> bool:
        """Whether the machine, not the route, is slow: overloaded (``load``), or the other routes
        slowed like ``name`` — half of them sick too, or their median slowdown at least ``SLOWED``
        and ``alike`` times its own."""
        if self.load is not None and self.busy_load > 0 and self.load() >= self.busy_load:
            return True
        others = [b for other, b in self.routes.items() if other != name and b.samples]
        if not others:
            return False
        if 2 * sum(b.sick() for b in others) >= len(others):
            return True
        slowed = statistics.median(b.slowdown() for b in others)
        return slowed >= max(SLOWED, self.alike * self.routes[name].slowdown())

    def states(self, now: float) -> Mapping[str, str]:
        """Each route: ``in`` or ``quarantined`` (for diagnostics and metrics)."""
        return {name: "quarantined" if b.quarantined(now) else "in" for name, b in self.routes.items()}
