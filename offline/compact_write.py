"""Writing cleaned segments: now in `runtime.log.cleaner.write` (the module docstring there has
the rules), shared with the brokers' live cleaner (the offline/actors layers may not import each
other, so code both need lives in runtime/). Re-exported here under the names the offline job
always used."""

from runtime.log.cleaner.write import (
    DELETE_HORIZON_BIT,
    BatchCleaner,
    CleanedPartition,
    CleanedSegment,
    CleanStats,
    set_delete_horizon,
    survivors_by_scan,
    write_cleaned_partition,
)

__all__ = [
    "DELETE_HORIZON_BIT",
    "BatchCleaner",
    "CleanStats",
    "CleanedPartition",
    "CleanedSegment",
    "set_delete_horizon",
    "survivors_by_scan",
    "write_cleaned_partition",
]
