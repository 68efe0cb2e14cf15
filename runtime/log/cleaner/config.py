"""`CleanerConfig`: the broker's ``log.cleaner.*`` settings (Kafka's CleanerConfig), part of the
log manager's config (`LogManagerConfig.cleaner`). The per-topic compaction settings
(``min.cleanable.dirty.ratio``, ``min.compaction.lag.ms``, ``max.compaction.lag.ms``,
``delete.retention.ms``) are `LogConfig` fields, each log's own. Defaults are Kafka's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from runtime.properties import config_from_properties, property_metadata

# Kafka's SkimpyOffsetMap entry: a 16-byte MD5 of the key and an 8-byte offset.
OFFSET_MAP_ENTRY_BYTES: Final = 24


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    enable: bool = field(default=True, metadata=property_metadata("log.cleaner.enable"))
    # Passes run one at a time per thread; each thread has its share of the dedupe buffer.
    threads: int = field(default=1, metadata=property_metadata("log.cleaner.threads"))
    backoff_ms: int = field(default=15_000, metadata=property_metadata("log.cleaner.backoff.ms"))
    dedupe_buffer_size: int = field(
        default=128 * 1024 * 1024, metadata=property_metadata("log.cleaner.dedupe.buffer.size")
    )
    io_buffer_load_factor: float = field(
        default=0.9, metadata=property_metadata("log.cleaner.io.buffer.load.factor")
    )

    def __post_init__(self) -> None:
        for key, ok, value in (
            ("log.cleaner.threads", self.threads >= 1, self.threads),
            ("log.cleaner.backoff.ms", self.backoff_ms >= 0, self.backoff_ms),
            (
                "log.cleaner.dedupe.buffer.size",
                self.dedupe_buffer_size >= OFFSET_MAP_ENTRY_BYTES,
                self.dedupe_buffer_size,
            ),
            (
                "log.cleaner.io.buffer.load.factor",
                0.0 < self.io_buffer_load_factor <= 1.0,
                self.io_buffer_load_factor,
            ),
        ):
            if not ok:
                raise ValueError(f"{key}: out of range: {value!r}")

    @property
    def max_map_entries(self) -> int:
        """Keys one pass may map (Kafka: the buffer split over the threads, times the load
        factor, over 24 bytes an entry)."""
        per_thread = self.dedupe_buffer_size // self.threads
        return max(1, int(per_thread * self.io_buffer_load_factor) // OFFSET_MAP_ENTRY_BYTES)

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> CleanerConfig:
        return config_from_properties(cls, props)
