"""`Rate`: a value per second measured over a few sampled windows — Kafka's `Rate` over a
`SampledStat` (org.apache.kafka.common.metrics.stats), the measure client quotas enforce.

Samples. There are `samples` (quota.window.num, 11) samples of `window_ms`
(quota.window.size.seconds, 1 s) each. A value is added to the current sample; a sample is
complete once `window_ms` has passed since it started, and the next value then starts the next
sample (at that value's time, as Kafka's do) in the ring, reusing the oldest one. A sample that
started `samples * window_ms` or more ago is obsolete: it is zeroed (restarted at the time of
the measure) before every measure.

Measure. `measure(now)` is the sum of the samples divided by the window they span:
`now - (start of the oldest sample)`, but never less than `samples - 1` whole windows (so a
client's first bytes are not divided by a few milliseconds) and never less than 1 ms. With the
defaults a rate is the bytes of the last 10-11 s over at least 10 s.

Worked example (11 samples of 1 s): 500 KB recorded at t = 0 ms, then measured at t = 2000 ms:
the oldest sample started at 0, 2000 ms have passed, fewer than 10 whole windows, so the window
is 2000 + 8 * 1000 = 10000 ms and the rate is 500 KB / 10 s = 50 KB/s.

State: a `Rate` belongs to one `ClientQuotaManager` (manager.py), whose owner (the broker's event
loop) is the only caller, so it needs no lock.
"""

from __future__ import annotations

from typing import Final

MIN_WINDOW_MS: Final = 1  # a rate over an empty window is undefined: Kafka's floor


class Rate:
    """Values recorded at times (ms), measured as a rate per second."""

    __slots__ = ("_current", "_samples", "_starts", "_values", "_window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        assert samples >= 2, samples
        assert window_ms > 0, window_ms
        self._samples = samples
        self._window_ms = window_ms
        # The ring: each sample's start time and its total; only the first `len` are in use
        # (Kafka grows its list up to `samples` the same way).
        self._starts: list[int] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Add `value` (negative to take back what was recorded) at `now_ms`."""
        if not self._starts:
            self._starts.append(now_ms)
            self._values.append(0.0)
            self._current = 0
        elif now_ms >= self._starts[self._current] + self._window_ms:
            self._advance(now_ms)
        self._values[self._current] += value

    def _advance(self, now_ms: int) -> None:
        self._current = (self._current + 1) % self._samples
        if self._current >= len(self._starts):
            self._starts.append(now_ms)
            self._values.append(0.0)
        else:
            self._starts[self._current] = now_ms
            self._values[self._current] = 0.0

    def _purge_obsolete(self, now_ms: int) -> None:
        expire_ms = self._samples * self._window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire_ms:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def window_ms(self, now_ms: int) -> int:
        """The span the rate is measured over at `now_ms` (Kafka's `Rate.windowSize`)."""
        self._purge_obsolete(now_ms)
        oldest = min(self._starts, default=now_ms)
        elapsed_ms = now_ms - oldest
        min_full_windows = self._samples - 1
        full_windows = elapsed_ms // self._window_ms
        if full_windows < min_full_windows:
            elapsed_ms += (min_full_windows - full_windows) * self._window_ms
        return max(elapsed_ms, MIN_WINDOW_MS)

    def measure(self, now_ms: int) -> float:
        """The rate per second at `now_ms`."""
        window_ms = self.window_ms(now_ms)  # purges first, as Kafka's measure does
        return sum(self._values) * 1000.0 / window_ms

    def last_record_ms(self) -> int | None:
        """When the current sample started (None: nothing recorded), for idle expiry."""
        return self._starts[self._current] if self._starts else None
