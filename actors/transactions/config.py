"""The transaction coordinator's settings, under Kafka's property names and Kafka's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Self

from runtime.properties import PROPERTY, config_from_properties, property_metadata


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    # Partitions of __transaction_state when it is created.
    num_partitions: int = field(
        default=50, metadata=property_metadata("transaction.state.log.num.partitions")
    )
    # Its replication factor and min.insync.replicas: Kafka's 3 and 2. The topic is not created
    # while fewer brokers are alive (node/broker/groups.py); a smaller cluster lowers both.
    replication_factor: int = field(
        default=3, metadata=property_metadata("transaction.state.log.replication.factor")
    )
    min_isr: int = field(default=2, metadata=property_metadata("transaction.state.log.min.isr"))
    segment_bytes: int = field(
        default=104_857_600, metadata=property_metadata("transaction.state.log.segment.bytes")
    )
    # Bytes read per step while loading a partition.
    load_buffer_size: int = field(
        default=5_242_880, metadata=property_metadata("transaction.state.log.load.buffer.size")
    )
    # The longest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT).
    transaction_max_timeout_ms: int = field(
        default=900_000, metadata=property_metadata("transaction.max.timeout.ms")
    )
    # How often ongoing transactions past their timeout are looked for and aborted.
    abort_timed_out_transaction_cleanup_interval_ms: int = field(
        default=10_000,
        metadata=property_metadata("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
    )
    # How long a write of the coordinator (and a marker) waits for the ISR.
    write_timeout_ms: int = field(
        default=5_000, metadata=property_metadata("transaction.state.log.write.timeout.ms")
    )

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value < 1:
                names = spec.metadata.get(PROPERTY) or (spec.name,)
                raise ValueError(f"{names[0]} must be >= 1, got {value}")

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> Self:
        return config_from_properties(cls, props)
