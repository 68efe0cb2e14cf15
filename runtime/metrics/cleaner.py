"""The live log cleaner's metrics, in Kafka's LogCleaner / LogCleanerManager style.

Kafka's JMX names become ``kafka_log_logcleaner_*`` and ``kafka_log_logcleanermanager_*``
gauges (max-buffer-utilization-percent, cleaner-recopy-percent, max-clean-time-secs,
max-dirty-percent, time-since-last-run-ms, uncleanable-partitions-count); totals Kafka keeps
only in its log lines (bytes and records read and written, passes swapped, discarded, failed)
are ``ketch_logcleaner_*`` counters. The source is the cleaner's `CleanerStats`
(runtime/log/cleaner/cleaner.py), read at scrape time on the event loop that writes it.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client.metrics_core import Metric

from runtime.clock import Clock
from runtime.metrics.registry import counter, gauge


class CleanerStatsSource(Protocol):
    @property
    def passes(self) -> int: ...
    @property
    def discarded(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def bytes_read(self) -> int: ...
    @property
    def bytes_written(self) -> int: ...
    @property
    def records_read(self) -> int: ...
    @property
    def records_written(self) -> int: ...
    @property
    def last_clean_wall_ms(self) -> int: ...
    @property
    def last_run_monotonic_ms(self) -> int: ...
    @property
    def max_clean_time_ms(self) -> int: ...
    @property
    def last_recopy_ratio(self) -> float: ...
    @property
    def last_buffer_utilization(self) -> float: ...
    @property
    def max_dirty_ratio(self) -> float: ...
    @property
    def uncleanable_partitions(self) -> int: ...


def log_cleaner_metrics(stats: CleanerStatsSource, clock: Clock) -> list[Metric]:
    cleaner, manager = "kafka_log_logcleaner_", "kafka_log_logcleanermanager_"
    since_run = (
        clock.monotonic_ms() - stats.last_run_monotonic_ms
        if stats.last_run_monotonic_ms >= 0
        else 0
    )
    return [
        gauge(
            cleaner + "max_buffer_utilization_percent",
            "Offset map use of the last pass, percent of log.cleaner.dedupe.buffer.size",
            100.0 * stats.last_buffer_utilization,
        ),
        gauge(
            cleaner + "cleaner_recopy_percent",
            "Bytes written over bytes read by the last pass, percent",
            100.0 * stats.last_recopy_ratio,
        ),
        gauge(
            cleaner + "max_clean_time_secs",
            "Longest pass so far, plan to swap",
            stats.max_clean_time_ms / 1000,
        ),
        gauge(
            cleaner + "last_clean_timestamp_ms",
            "Wall time the last pass was swapped in (-1: none yet)",
            stats.last_clean_wall_ms,
        ),
        gauge(
            manager + "max_dirty_percent",
            "Highest dirty ratio of a compacted log at the last look, percent",
            100.0 * stats.max_dirty_ratio,
        ),
        gauge(
            manager + "time_since_last_run_ms",
            "Since a cleaner worker last looked for work",
            since_run,
        ),
        gauge(
            manager + "uncleanable_partitions_count",
            "Partitions the cleaner gave up on (keyless records, too many keys)",
            stats.uncleanable_partitions,
        ),
        counter("ketch_logcleaner_cleaned_bytes", "Bytes of segments cleaned", stats.bytes_read),
        counter("ketch_logcleaner_written_bytes", "Bytes of cleaned segments", stats.bytes_written),
        counter("ketch_logcleaner_records_read", "Records in cleaned segments", stats.records_read),
        counter(
            "ketch_logcleaner_records_written",
            "Records kept by the cleaner",
            stats.records_written,
        ),
        counter("ketch_logcleaner_passes", "Cleaning passes swapped in", stats.passes),
        counter(
            "ketch_logcleaner_discarded_passes",
            "Passes the log's owner refused (the log changed meanwhile)",
            stats.discarded,
        ),
        counter("ketch_logcleaner_failed_passes", "Passes that failed", stats.failed),
    ]
