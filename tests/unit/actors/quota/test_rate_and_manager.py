"""Client quota rules (actors/quota): Kafka's rate windows, its eight-level resolution order and
which clients share a rate, the throttle-time formula, the bound on one fetch, and the checks of
an AlterClientQuotas entry. Time is a ManualClock; the expected numbers are worked by hand."""

from __future__ import annotations

import pytest

from actors.quota.entities import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QuotaEntity,
    entity_of,
    entry_problem,
    user_of,
)
from actors.quota.manager import ClientQuotaManager, QuotaConfig, throttle_time_ms
from actors.quota.rate import Rate
from runtime.clock import ManualClock
from wire.messages.quotas import EntityData, OpData

KB = 1000


# -- Rate ------------------------------------------------------------------------------------------


def test_a_first_value_is_spread_over_at_least_samples_minus_one_windows() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(500 * KB, now_ms=0)
    # Elapsed 2000 ms, fewer than 10 whole windows: the window is 2000 + 8 * 1000.
    assert rate.window_ms(2000) == 10_000
    assert rate.measure(2000) == pytest.approx(50 * KB)
    # At the very start the window is the 10 whole windows.
    assert rate.window_ms(0) == 10_000


def test_old_samples_expire_and_the_window_follows_the_oldest_sample() -> None:
    rate = Rate(samples=3, window_ms=1000)
    rate.record(100, now_ms=0)  # sample 0 starts at 0
    rate.record(100, now_ms=1500)  # complete: sample 1 starts at 1500
    rate.record(100, now_ms=2600)  # sample 2 starts at 2600
    # Oldest start 0, elapsed 2600 (2 whole windows = samples - 1): no padding.
    assert rate.window_ms(2600) == 2600
    assert rate.measure(2600) == pytest.approx(300 * 1000 / 2600)
    # At 3000 sample 0 (started 0) is 3 windows old: obsolete, zeroed and restarted at 3000;
    # the oldest is then sample 1 (1500): 1500 ms, padded to 2 windows.
    assert rate.measure(3000) == pytest.approx(200 * 1000 / 2500)
    rate.record(100, now_ms=3700)  # reuses the ring's next slot (sample 0), started at 3700
    assert rate.window_ms(3700) == 3700 - 1500


def test_a_value_taken_back_leaves_the_rate_as_it_was() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(1000, now_ms=0)
    before = rate.measure(10)
    rate.record(400, now_ms=10)
    rate.record(-400, now_ms=10)
    assert rate.measure(10) == before


# -- throttle time -----------------------------------------------------------------------------


def test_throttle_time_is_kafkas_formula_rounded_half_up() -> None:
    # X = (O - T) / T * W: 150 KB/s observed, 100 KB/s allowed, 10 s window -> 5 s.
    assert throttle_time_ms(150 * KB, 100 * KB, 10_000) == 5000
    assert throttle_time_ms(100.05, 100, 10_000) == 5  # 5.0 exactly
    assert throttle_time_ms(100.0125, 100, 10_000) == 1  # 1.25 -> 1
    assert throttle_time_ms(100.015, 100, 10_000) == 2  # 1.5 -> 2 (half up, not to even)


def manager() -> tuple[ManualClock, ClientQuotaManager]:
    clock = ManualClock()
    return clock, ClientQuotaManager(clock, QuotaConfig())


def test_a_client_over_its_quota_is_throttled_and_others_are_not() -> None:
    clock, quotas = manager()
    quotas.set_quotas({QuotaEntity(client_id="slow"): {PRODUCER_BYTE_RATE: 100 * KB}})
    # 1 MB in 10 s is exactly 100 KB/s: not throttled (the bound itself is allowed).
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "slow", 1000 * KB) == 0
    clock.advance(1000)
    # 500 KB more at 1 s: 1.5 MB over the 10 s window = 150 KB/s -> 5000 ms.
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "slow", 500 * KB) == 5000
    # Another client id, or the other key, is not limited.
    assert quotas.record(PRODUCER_BYTE_RATE, "ANONYMOUS", "fast", 10_000 * KB) == 0
    assert quotas.record(CONSUMER_BYTE_RATE, "ANONYMOUS", "slow", 10_000 * KB) == 0


@pytest.mark.parametrize("chunk", [10 * KB, 100 * KB, 300 * KB])
def test_a_client_that_waits_out_its_throttle_times_moves_about_its_quota(chunk: int) -> None:
    clock, quotas = manager()
    quotas.set_quotas({QuotaEntity(client_id="c"): {PRODUCER_BYTE_RATE: 100 * KB}})
    sent = throttled = 0
    while clock.monotonic_ms() < 120_000:
        throttle_ms = quotas.record(PRODUCER_BYTE_RATE, "u", "c", chunk)
        sent += chunk
        throttled += throttle_ms > 0
        clock.advance(max(throttle_ms, 5))  # a client sends again 5 ms after an answer
    assert throttled > 10
    # Over two minutes the rate is held to the bound (each throttle is computed after the
    # chunk that crossed it, so a little over: 1.7 / 3.3 / 12.5 % for these chunk sizes).
    assert 100 * KB <= sent * 1000 / clock.monotonic_ms() <= 115 * KB


def test_a_changed_bound_applies_to_the_rate_already_measured() -> None:
    _, quotas = manager()
    quotas.set_quotas({QuotaEntity(client_id="c"): {PRODUCER_BYTE_RATE: 1000 * KB}})
    assert quotas.record(PRODUCER_BYTE_RATE, "u", "c", 2000 * KB) == 0  # 200 KB/s
    quotas.set_quotas({QuotaEntity(client_id="c"): {PRODUCER_BYTE_RATE: 100 * KB}})
    assert quotas.record(PRODUCER_BYTE_RATE, "u", "c", 0) == 10_000  # (200-100)/100 * 10 s
    quotas.set_quotas({})
    assert quotas.record(PRODUCER_BYTE_RATE, "u", "c", 10_000 * KB) == 0


def test_one_fetch_may_read_at_most_the_bound_over_samples_minus_one_windows() -> None:
    _, quotas = manager()
    assert quotas.max_value_in_window(CONSUMER_BYTE_RATE, "u", "c") is None
    quotas.set_quotas({QuotaEntity(user="u"): {CONSUMER_BYTE_RATE: 50 * KB}})
    assert quotas.max_value_in_window(CONSUMER_BYTE_RATE, "u", "c") == 500 * KB


# -- resolution order ----------------------------------------------------------------------------

LEVELS = [
    (QuotaEntity("alice", "app"), ("alice", "app")),
    (QuotaEntity("alice", DEFAULT), ("alice", "app")),
    (QuotaEntity("alice", None), ("alice", "")),
    (QuotaEntity(DEFAULT, "app"), ("alice", "app")),
    (QuotaEntity(DEFAULT, DEFAULT), ("alice", "app")),
    (QuotaEntity(DEFAULT, None), ("alice", "")),
    (QuotaEntity(None, "app"), ("", "app")),
    (QuotaEntity(None, DEFAULT), ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_entity_in_kafkas_order_applies(level: int) -> None:
    _, quotas = manager()
    # Every level from this one down has a quota (its bound names it): this one wins.
    quotas.set_quotas(
        {
            entity: {PRODUCER_BYTE_RATE: 1000.0 + i}
            for i, (entity, _) in enumerate(LEVELS)
            if i >= level
        }
    )
    tags, bound = quotas.resolve(PRODUCER_BYTE_RATE, "alice", "app")
    assert bound == 1000.0 + level
    assert tags == LEVELS[level][1]


def test_without_any_quota_a_client_is_not_limited() -> None:
    _, quotas = manager()
    quotas.set_quotas({QuotaEntity(user="bob"): {PRODUCER_BYTE_RATE: 1.0}})
    assert quotas.resolve(PRODUCER_BYTE_RATE, "alice", "app") == (("", "app"), None)
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "app", 10**9) == 0


def test_a_user_quota_is_shared_by_all_of_its_client_ids() -> None:
    _, quotas = manager()
    quotas.set_quotas({QuotaEntity(user="alice"): {PRODUCER_BYTE_RATE: 100 * KB}})
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "one", 600 * KB) == 0
    # The second client id adds to the same rate: 1.2 MB / 10 s = 120 KB/s -> 2000 ms.
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "two", 600 * KB) == 2000
    # A default (user, client-id) quota gives each pair its own rate instead.
    quotas.set_quotas({QuotaEntity(DEFAULT, DEFAULT): {PRODUCER_BYTE_RATE: 100 * KB}})
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "three", 600 * KB) == 0
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "four", 600 * KB) == 0


# -- entities and checks ---------------------------------------------------------------------------


def test_principals_and_wire_entities() -> None:
    assert user_of("User:alice") == "alice"
    assert user_of("User:ANONYMOUS") == "ANONYMOUS"
    both = [
        EntityData(entity_type="client-id", entity_name=None),
        EntityData(entity_type="user", entity_name="alice"),
    ]
    entity = entity_of(both)
    assert entity == QuotaEntity(user="alice", client_id=DEFAULT)
    assert isinstance(entity, QuotaEntity)
    assert entity.components() == list(reversed(both))
    assert str(entity) == "user=alice, client-id=<default>"


@pytest.mark.parametrize(
    ("op", "problem"),
    [
        (OpData(key=PRODUCER_BYTE_RATE, value=1024.0), None),
        (OpData(key=PRODUCER_BYTE_RATE, value=0.0, remove=True), None),
        (OpData(key=PRODUCER_BYTE_RATE, value=0.0), "greater than 0"),
        (OpData(key=CONSUMER_BYTE_RATE, value=1.5), "Long"),
        (OpData(key=CONSUMER_BYTE_RATE, value=float("nan")), "Long"),
        (OpData(key=CONSUMER_BYTE_RATE, value=2.0**64), "too large"),
        (OpData(key="request_percentage", value=10.0), "not enforced"),
        (OpData(key="producer_byte_rat", value=10.0), "Invalid configuration key"),
    ],
)
def test_entry_checks(op: OpData, problem: str | None) -> None:
    outcome = entry_problem([EntityData(entity_type="user", entity_name="u")], [op])
    if problem is None:
        assert outcome == QuotaEntity(user="u")
    else:
        assert isinstance(outcome, str)
        assert problem in outcome


def test_a_key_named_twice_in_an_entry_is_refused() -> None:
    ops = [OpData(key=PRODUCER_BYTE_RATE, value=1.0), OpData(key=PRODUCER_BYTE_RATE, value=2.0)]
    outcome = entry_problem([EntityData(entity_type="user", entity_name="u")], ops)
    assert isinstance(outcome, str)
    assert "Duplicate" in outcome
