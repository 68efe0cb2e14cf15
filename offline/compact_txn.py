"""Transactions as offline compaction sees them: now in `runtime.log.cleaner.txn`, shared with
the brokers' live cleaner (the offline/actors layers may not import each other, so code both
need lives in runtime/). Re-exported here under the names the offline job always used."""

from runtime.log.cleaner.txn import (
    MARKER_TYPES,
    TransactionScan,
    control_type,
    index_entry_for,
    read_control_type,
    source_index_entries,
)

__all__ = [
    "MARKER_TYPES",
    "TransactionScan",
    "control_type",
    "index_entry_for",
    "read_control_type",
    "source_index_entries",
]
