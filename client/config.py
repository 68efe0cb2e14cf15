"""Client, producer and consumer settings, under Kafka's property names and defaults.

Each dataclass field is the snake_case form of a Kafka client property (`request_timeout_ms`
is `request.timeout.ms`), with Kafka's default. `from_properties()` reads a mapping keyed by
the dotted names, as found in a TOML config file or given as `--config k=v` flags, and rejects
names it does not know so a typo never silently falls back to a default.

`ProducerConfig.enable_idempotence` is the one setting whose default depends on another: Kafka
3.x turns idempotence on by default but switches it off silently when acks is 0 or 1 and the user
did not set `enable.idempotence`, while an explicit `enable.idempotence=true` with acks other than
all is a configuration error. To tell "not given" from "given as true" the field is `bool | None`:
None (the default, also what `from_properties` leaves when the property is absent) means "Kafka's
default for these acks"; `ProducerConfig.idempotent` is the resolved value the producer uses.

A `transactional_id` (transactional.id) makes the producer transactional (client/transactions.py),
which implies idempotence: as Kafka's ConfigException, it refuses enable.idempotence=false and
acks other than all.

`ConsumerConfig.isolation_level` is Kafka's isolation.level: "read_uncommitted" (the default)
reads up to the high watermark, "read_committed" up to the last stable offset and without the
records of aborted transactions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from runtime.properties import config_from_properties
from wire.frames import DEFAULT_MAX_FRAME_BYTES


@dataclass(frozen=True, slots=True)
class ClientConfig:
    request_timeout_ms: int = 30_000
    socket_connection_setup_timeout_ms: int = 10_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    # Upper bound on retrying any one operation (Kafka uses it for produce; the client applies
    # it to every retried request so nothing retries forever).
    delivery_timeout_ms: int = 120_000
    metadata_max_age_ms: int = 300_000
    # Requests one connection may have outstanding; more wait for a slot (pipelining depth).
    max_in_flight_requests_per_connection: int = 5
    # Largest response frame accepted (the client side of socket.request.max.bytes).
    max_response_bytes: int = DEFAULT_MAX_FRAME_BYTES

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value < 0 or (value == 0 and field.name.startswith(("request_", "max_"))):
                raise ValueError(f"{field.name} must be positive, got {value}")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> Self:
        return config_from_properties(cls, props, strict=True)


ACKS_ALL = -1


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    acks: int = ACKS_ALL  # 0, 1 or -1 ("all")
    linger_ms: int = 5
    batch_size: int = 16_384
    max_request_size: int = 1_048_576
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    # How long send() may wait for the topic's metadata before failing.
    max_block_ms: int = 60_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    # Seed of the sticky partitioner's choices for null keys.
    partitioner_seed: int = 0
    # enable.idempotence: None = not given (on with acks=all, off with acks 0/1); True/False as
    # given. Read `idempotent` for the effective value (see the module docstring).
    enable_idempotence: bool | None = None
    # transactional.id: None for a producer without transactions (see client/transactions.py).
    transactional_id: str | None = None
    # transaction.timeout.ms: how long the coordinator lets a transaction stay open before it
    # aborts it (and fences the producer's epoch).
    transaction_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.acks not in (0, 1, ACKS_ALL):
            raise ValueError(f"acks must be 0, 1 or all (-1), got {self.acks}")
        if self.transactional_id is not None:
            self._check_transactional()
        if self.enable_idempotence and self.acks != ACKS_ALL:
            # Kafka's ConfigException: with acks=0 the producer never learns whether a sequence
            # was written, and with acks=1 a leader change can lose an acknowledged batch.
            raise ValueError(
                "enable.idempotence=true requires acks=all (-1), got "
                f"acks={self.acks}; set acks=all or enable.idempotence=false"
            )
        if self.batch_size <= 0 or self.max_request_size <= 0:
            raise ValueError("batch.size and max.request.size must be positive")
        if self.linger_ms < 0 or self.delivery_timeout_ms <= 0 or self.request_timeout_ms <= 0:
            raise ValueError("linger.ms must be >= 0 and the timeouts positive")

    def _check_transactional(self) -> None:
        # Kafka's ConfigExceptions: a transaction's records are written exactly once only by an
        # idempotent producer, and idempotence needs acks=all.
        if not self.transactional_id:
            raise ValueError("transactional.id must not be empty (leave it unset instead)")
        if self.enable_idempotence is False:
            raise ValueError(
                "a transactional producer is idempotent: transactional.id "
                f"{self.transactional_id!r} cannot be set with enable.idempotence=false"
            )
        if self.acks != ACKS_ALL:
            raise ValueError(
                f"a transactional producer needs acks=all (-1), got acks={self.acks} with "
                f"transactional.id {self.transactional_id!r}"
            )
        if self.transaction_timeout_ms <= 0:
            raise ValueError(
                f"transaction.timeout.ms must be positive, got {self.transaction_timeout_ms}"
            )

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> Self:
        values = dict(props)
        if str(values.get("acks", "")).lower() == "all":
            values["acks"] = ACKS_ALL
        return config_from_properties(cls, values, strict=True)

    @property
    def idempotent(self) -> bool:
        """Whether the producer is idempotent: `enable_idempotence` as given, else acks=all
        (always, for a transactional producer)."""
        if self.transactional_id is not None:
            return True
        if self.enable_idempotence is None:
            return self.acks == ACKS_ALL
        return self.enable_idempotence

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None


OFFSET_RESET_POLICIES = ("earliest", "latest", "none")
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    auto_offset_reset: str = "latest"
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    # -1 for a consumer; a broker's replica fetcher passes its own broker id.
    replica_id: int = -1
    isolation_level: str = READ_UNCOMMITTED

    def __post_init__(self) -> None:
        if self.auto_offset_reset not in OFFSET_RESET_POLICIES:
            raise ValueError(
                f"auto.offset.reset must be one of {OFFSET_RESET_POLICIES}, "
                f"got {self.auto_offset_reset!r}"
            )
        if self.isolation_level not in ISOLATION_LEVELS:
            raise ValueError(
                f"isolation.level must be one of {ISOLATION_LEVELS}, got {self.isolation_level!r}"
            )
        if self.fetch_max_wait_ms < 0 or self.fetch_min_bytes < 0:
            raise ValueError("fetch.max.wait.ms and fetch.min.bytes must be >= 0")
        if self.fetch_max_bytes <= 0 or self.max_partition_fetch_bytes <= 0:
            raise ValueError("fetch.max.bytes and max.partition.fetch.bytes must be positive")
        if self.request_timeout_ms <= self.fetch_max_wait_ms:
            # A long poll that outlives the request timeout would be cut off as a failure.
            raise ValueError("request.timeout.ms must exceed fetch.max.wait.ms")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> Self:
        return config_from_properties(cls, props, strict=True)

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED
