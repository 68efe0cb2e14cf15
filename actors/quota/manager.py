"""`ClientQuotaManager`: the byte-rate quotas of one broker, as Kafka's ClientQuotaManager
applies them (KIP-13, KIP-55 for users, KIP-219 for how a client is told).

Which quota applies. For a request from user U (the principal's name) with client id C, each
quota key (producer_byte_rate, consumer_byte_rate) is resolved on its own, in Kafka's order; the
first entity that has a value for the key is the one:

    1. user U, client-id C          5. user <default>, client-id <default>
    2. user U, client-id <default>  6. user <default>
    3. user U                       7. client-id C
    4. user <default>, client-id C  8. client-id <default>

No entity: the client is not limited. The level found also says which clients share one rate
(Kafka's quota metric tags): levels 1, 2, 4 and 5 measure (U, C) together, levels 3 and 6 every
client id of user U together, levels 7 and 8 every user of client id C together. So
`user=alice` with 1 MB/s is 1 MB/s for all of alice's clients at once, while
`user=<default>, client-id=<default>` gives each (user, client id) pair its own.

Throttle time. A value (bytes) is added to its rate (rate.py: 11 samples of 1 s by default,
quota.window.num and quota.window.size.seconds) and the rate measured; above the bound B the
client must wait `(rate - B) / B * window` ms, the time after which, with nothing more
recorded, the rate over the longer window is back at B (Kafka's QuotaUtils.throttleTime),
rounded half up. Kafka caps this only for the request-time quota (at one window), which ketch
does not enforce (entities.py says why), so a byte-rate throttle time is not capped, as in
Kafka; what bounds it is that a Fetch may read at most `max_value_in_window` bytes at once
(Kafka's getMaxValueInQuotaWindow: B over `samples - 1` windows).

A rate is measured only while some quota applies to it: a client that had none starts from
nothing when one is set. Rates idle for an hour are dropped (Kafka's inactive sensor expiry).

State: owned by the broker's event loop (the quota layer calls it from request handlers, the
UpdateMetadata layer replaces the quotas with `set_quotas`), so it needs no lock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from actors.quota.entities import DEFAULT, QUOTA_KEYS, QuotaEntity
from actors.quota.rate import Rate
from runtime.clock import Clock
from runtime.properties import config_from_properties

_INACTIVE_RATE_EXPIRY_MS: Final = 3_600_000  # Kafka's InactiveSensorExpirationTimeSeconds
_EXPIRY_SWEEP_MS: Final = 60_000

Tags = tuple[str, str]  # (user, client id) a rate is shared by; "" where it is not split


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """Kafka's broker settings of the same names (quota.window.num, quota.window.size.seconds)."""

    quota_window_num: int = 11  # 10 whole windows and the current one
    quota_window_size_seconds: int = 1

    def __post_init__(self) -> None:
        if self.quota_window_num < 2:
            raise ValueError(f"quota.window.num must be at least 2: {self.quota_window_num}")
        if self.quota_window_size_seconds < 1:
            raise ValueError(
                f"quota.window.size.seconds must be at least 1: {self.quota_window_size_seconds}"
            )

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> QuotaConfig:
        return config_from_properties(cls, properties)


class ClientQuotaManager:
    """The quotas this broker was sent and the rates they are measured by."""

    def __init__(self, clock: Clock, config: QuotaConfig | None = None) -> None:
        self._clock = clock
        self._config = config or QuotaConfig()
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        # Per key, the entities with a value for it (what resolution reads).
        self._by_key: dict[str, dict[QuotaEntity, float]] = {key: {} for key in QUOTA_KEYS}
        self._rates: dict[tuple[str, Tags], Rate] = {}
        self._next_sweep_ms = 0

    # -- the quotas -------------------------------------------------------------------------------

    def set_quotas(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Replace every quota (the controller sends the whole set). Rates are kept: a changed
        bound applies to what was already measured, as Kafka's does."""
        self._quotas = {entity: dict(values) for entity, values in quotas.items() if values}
        self._by_key = {key: {} for key in QUOTA_KEYS}
        for entity, values in self._quotas.items():
            for key, value in values.items():
                if key in self._by_key:
                    self._by_key[key][entity] = value

    def quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def has_quota(self, key: str) -> bool:
        """Whether any entity has a quota of `key`: without one, the produce and fetch paths
        skip measuring altogether (the common case, on every request)."""
        return bool(self._by_key[key])

    def resolve(self, key: str, user: str, client_id: str) -> tuple[Tags, float | None]:
        """(the clients the rate is shared by, the bound) for a request of (user, client_id)."""
        bounds = self._by_key[key]
        if not bounds:
            return ("", client_id), None
        for entity, tags in _candidates(user, client_id):
            bound = bounds.get(entity)
            if bound is not None:
                return tags, bound
        return ("", client_id), None

    # -- measuring --------------------------------------------------------------------------------

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Add `value` to the client's rate for `key`; the throttle time it earns (ms, 0 when
        within the quota or without one)."""
        tags, bound = self.resolve(key, user, client_id)
        if bound is None:
            return 0
        now_ms = self._clock.monotonic_ms()
        self._maybe_sweep(now_ms)
        rate = self._rates.get((key, tags))
        if rate is None:
            config = self._config
            rate = self._rates[key, tags] = Rate(
                config.quota_window_num, config.quota_window_size_seconds * 1000
            )
        rate.record(value, now_ms)
        measured = rate.measure(now_ms)
        if measured <= bound:
            return 0
        return throttle_time_ms(measured, bound, rate.window_ms(now_ms))

    def unrecord(self, key: str, user: str, client_id: str, value: float) -> None:
        """Take back a value `record` added (a throttled Fetch is answered empty, so its bytes
        were never sent: Kafka's unrecordQuotaSensor)."""
        tags, bound = self.resolve(key, user, client_id)
        rate = self._rates.get((key, tags))
        if bound is not None and rate is not None:
            rate.record(-value, self._clock.monotonic_ms())

    def max_value_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most one request may carry without being throttled whatever came before: the
        bound over `samples - 1` windows (None: no quota)."""
        _, bound = self.resolve(key, user, client_id)
        if bound is None:
            return None
        config = self._config
        return bound * (config.quota_window_num - 1) * config.quota_window_size_seconds

    def rate(self, key: str, user: str, client_id: str) -> float:
        """The measured rate (bytes/s) the client is held to for `key` (0 without a quota)."""
        tags, _ = self.resolve(key, user, client_id)
        rate = self._rates.get((key, tags))
        return 0.0 if rate is None else rate.measure(self._clock.monotonic_ms())

    def _maybe_sweep(self, now_ms: int) -> None:
        if now_ms < self._next_sweep_ms:
            return
        self._next_sweep_ms = now_ms + _EXPIRY_SWEEP_MS
        idle = [
            name
            for name, rate in self._rates.items()
            if now_ms - (rate.last_record_ms() or now_ms) >= _INACTIVE_RATE_EXPIRY_MS
        ]
        for name in idle:
            del self._rates[name]


def throttle_time_ms(measured: float, bound: float, window_ms: int) -> int:
    """How long a client measured at `measured` must wait for its rate over `window_ms` to be
    back at `bound`: X with measured * W / (W + X) = bound (Kafka's formula), rounded half up."""
    return math.floor((measured - bound) / bound * window_ms + 0.5)


def _candidates(user: str, client_id: str) -> Iterable[tuple[QuotaEntity, Tags]]:
    """Kafka's eight levels, most specific first, each with the tags of the rate it shares."""
    both = (user, client_id)
    yield QuotaEntity(user, client_id), both
    yield QuotaEntity(user, DEFAULT), both
    yield QuotaEntity(user, None), (user, "")
    yield QuotaEntity(DEFAULT, client_id), both
    yield QuotaEntity(DEFAULT, DEFAULT), both
    yield QuotaEntity(DEFAULT, None), (user, "")
    yield QuotaEntity(None, client_id), ("", client_id)
    yield QuotaEntity(None, DEFAULT), ("", client_id)
