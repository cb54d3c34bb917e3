"""A latency breaker per retrieval route (DESIGN §3). Pure: the caller passes monotonic seconds as ``now``."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable


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


class RouteBreaker:
    """Quarantines one route whose recent latencies are too high.

    - ``record(latency_ms, now)`` keeps the last ``window`` latencies. When the window is full and its
      P95 (``nearest_rank``) exceeds ``limit_ms``, the route is quarantined for ``quarantine_s`` seconds.
      A call that fails or times out should be recorded with the time it took (at least its budget).
    - While quarantined, ``allow(now)`` says no, except for one probe call every ``probe_every_s`` seconds
      (the first one ``probe_every_s`` after the trip): real traffic is what measures recovery, and one call
      in 30 s costs the read path little. Probe latencies enter the window like any other sample.
    - The route rejoins as soon as the window's P95 (probes included) is ≤ ``limit_ms``; with a window of 10
      that means its 10 latest samples are all within the limit. If the quarantine runs out first, the route
      rejoins with an empty window: it is judged again on 10 fresh samples, not on the ones that tripped it.

    Defaults: window 10, limit 150 ms, quarantine 10 minutes, a probe every 30 s, quantile 0.95.
    """

    def __init__(
        self,
        window: int = 10,
        limit_ms: float = 150.0,
        quarantine_s: float = 600.0,
        probe_every_s: float = 30.0,
        quantile: float = 0.95,
    ) -> None:
        if window < 1:
            raise ValueError("the window holds at least one sample")
        self.limit_ms = limit_ms
        self.quarantine_s = quarantine_s
        self.probe_every_s = probe_every_s
        self.quantile = quantile
        self._samples: deque[float] = deque(maxlen=window)
        self._until: float | None = None  # end of the quarantine, None when the route is in
        self._last_probe = 0.0

    @property
    def samples(self) -> tuple[float, ...]:
        return tuple(self._samples)

    def p95(self) -> float | None:
        """The window's percentile, or None while it is empty."""
        return nearest_rank(self._samples, self.quantile) if self._samples else None

    def quarantined(self, now: float) -> bool:
        if self._until is not None and now >= self._until:
            self._until = None
            self._samples.clear()
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
        in_quarantine = self.quarantined(now)
        self._samples.append(latency_ms)
        p95 = nearest_rank(self._samples, self.quantile)
        if in_quarantine:
            if p95 <= self.limit_ms:
                self._until = None
        elif len(self._samples) == self._samples.maxlen and p95 > self.limit_ms:
            self._until = now + self.quarantine_s
            self._last_probe = now
