"""Exponential backoff with seeded jitter, as Kafka's `ExponentialBackoff`.

The n-th consecutive failure (n = 0 for the first) waits

    min(max_ms, initial_ms * multiplier ** n * uniform(1 - jitter, 1 + jitter))

milliseconds. Kafka uses it for `reconnect.backoff.ms` / `reconnect.backoff.max.ms` (multiplier 2,
jitter 0.2) and for `retry.backoff.ms` / `retry.backoff.max.ms`. The jitter spreads the reconnects
of many clients after a broker restart so they do not arrive in lock step; it is drawn from an
injected `random.Random`, so a run replays exactly from its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    initial_ms: float
    max_ms: float
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.initial_ms < 0 or self.max_ms < 0:
            raise ValueError(f"backoff must not be negative: {self.initial_ms}, {self.max_ms}")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")

    def delay_ms(self, attempts: int, rng: random.Random) -> float:
        """Backoff before the next try after `attempts` consecutive failures (0 = first)."""
        if attempts < 0:
            raise ValueError(f"attempts must not be negative, got {attempts}")
        # Kafka caps the exponent once the term passes max_ms; capping the term does the same
        # and keeps multiplier ** attempts from overflowing a float after many failures.
        term = float(self.initial_ms)
        for _ in range(attempts):
            if term >= self.max_ms:
                break
            term *= self.multiplier
        factor = 1.0 if self.jitter == 0 else rng.uniform(1 - self.jitter, 1 + self.jitter)
        return min(float(self.max_ms), term * factor)
