"""Exponential backoff: growth, cap, jitter bounds, determinism from the seed."""

from __future__ import annotations

import random

import pytest

from runtime.net.backoff import ExponentialBackoff


def test_delays_double_until_the_cap_without_jitter() -> None:
    backoff = ExponentialBackoff(initial_ms=50, max_ms=1000, jitter=0)
    rng = random.Random(0)
    assert [backoff.delay_ms(n, rng) for n in range(7)] == [50, 100, 200, 400, 800, 1000, 1000]
    assert backoff.delay_ms(10_000, rng) == 1000


def test_jitter_stays_within_twenty_percent_and_under_the_cap() -> None:
    seed = 42
    backoff = ExponentialBackoff(initial_ms=100, max_ms=1000)
    rng = random.Random(seed)
    for attempts in range(8):
        nominal = min(1000, 100 * 2**attempts)
        for _ in range(50):
            delay = backoff.delay_ms(attempts, rng)
            assert nominal * 0.8 - 1e-9 <= delay <= min(1000, nominal * 1.2), f"seed={seed}"


def test_jitter_is_reproducible_from_the_seed() -> None:
    backoff = ExponentialBackoff(initial_ms=100, max_ms=10_000)
    first = [backoff.delay_ms(n, random.Random(9)) for n in range(5)]
    second = [backoff.delay_ms(n, random.Random(9)) for n in range(5)]
    assert first == second
    assert len({backoff.delay_ms(2, random.Random(s)) for s in range(20)}) > 1


def test_rejects_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="negative"):
        ExponentialBackoff(initial_ms=-1, max_ms=10)
    with pytest.raises(ValueError, match="multiplier"):
        ExponentialBackoff(initial_ms=1, max_ms=10, multiplier=0.5)
    with pytest.raises(ValueError, match="jitter"):
        ExponentialBackoff(initial_ms=1, max_ms=10, jitter=1.0)
    with pytest.raises(ValueError, match="attempts"):
        ExponentialBackoff(initial_ms=1, max_ms=10).delay_ms(-1, random.Random(0))
