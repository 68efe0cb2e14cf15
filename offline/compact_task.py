"""One Spark task of ``ketch compact``: key/offset map and rewrite of one partition.

`PartitionTask` is the function the job (`offline.compact`) maps over its partition plans, one
Spark task per partition; it can be called without Spark (the tests do). Per plan it runs the
brokers' own compaction code (`runtime.log.cleaner`) on the planned segments:

1. `runtime.log.cleaner.offset_map.build_offset_map`: each record's key (a 16-byte digest, or
   the key itself when shorter) and offset, read from the segment files with
   `wire.record_reader.iter_keys` (lengths, offset deltas and keys only); control batches and
   the plan's aborted batches do not count; a record without a key or a damaged batch refuses
   the partition. The map is bounded (``max_map_entries``, Kafka's dedupe buffer): when the
   planned segments hold more keys than it maps, the task cleans the prefix of whole segments
   that fits, as the live cleaner does, and says so (``sources_taken``); the next run goes on
   from there.
2. `runtime.log.cleaner.write.write_cleaned_partition` with those survivors, into the
   partition's directory under the staging directory.

This replaces a record-level DataFrame grouped by (partition, key): no record leaves the task,
and the survivor offsets (up to one per key) never reach the driver; only the small
`PartitionOutcome` does. Refusals come back as values (``error``), so one partition's refusal
does not stop the others from reporting theirs; anything else (I/O errors) fails the task.

State: a task owns what it builds; the source files are only read, and each task writes only its
own partition's staging directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from offline.compact_plan import CompactConfig, CompactError, PartitionPlan
from offline.compact_write import CleanStats, write_cleaned_partition
from runtime.log.cleaner.config import CleanerConfig
from runtime.log.cleaner.offset_map import build_offset_map

# Kafka's default log.cleaner.dedupe.buffer.size (128 MiB) at its load factor: about 5 million
# keys per partition before a run cleans only a prefix.
DEFAULT_MAX_MAP_ENTRIES = CleanerConfig().max_map_entries


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What one task reports: a refusal (`error`), or the cleaned segments of the first
    `sources_taken` planned segments, with the aborted batches among them and the stats."""

    partition: int
    error: str | None = None
    sources_taken: int = 0
    aborted_batches: frozenset[int] = frozenset()
    segments: tuple[tuple[int, int], ...] = ()  # (base offset, size) of each cleaned segment
    map_entries: int = 0
    stats: CleanStats = field(default_factory=CleanStats)


@dataclass(frozen=True, slots=True)
class PartitionTask:
    """The per-partition function (a plain picklable value, so Spark ships it to executors)."""

    staging_dir: Path
    config: CompactConfig
    now_ms: int
    max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES

    def __call__(self, plan: PartitionPlan) -> PartitionOutcome:
        try:
            mapped = build_offset_map(
                plan.directory,
                plan.sources,
                (),
                self.max_map_entries,
                aborted_batches=plan.aborted_batches,
            )
            cleaned = write_cleaned_partition(
                plan.directory,
                mapped.sources,
                mapped.survivors,
                self.staging_dir / plan.tp.dir_name,
                now_ms=self.now_ms,
                delete_retention_ms=self.config.delete_retention_ms,
                log_config=self.config.log,
                aborted_batches=mapped.aborted_batches,
            )
        except CompactError as exc:
            return PartitionOutcome(plan.partition, error=f"{plan.tp}: {exc}")
        return PartitionOutcome(
            plan.partition,
            sources_taken=len(mapped.sources),
            aborted_batches=mapped.aborted_batches,
            segments=tuple((s.base_offset, s.size_bytes) for s in cleaned.segments),
            map_entries=mapped.entries,
            stats=cleaned.stats,
        )
