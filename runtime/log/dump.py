"""`ketch dump-log`: print and check segment files, like Kafka's DumpLogSegments.

For a ``.snapshot`` file (producer state): one line per producer. For a ``.log`` file: one line
per batch (offsets, count, leader epoch, producer fields, position,
timestamp, size, codec, CRC and whether it is valid), and with ``--deep`` one ``|``-prefixed line
per record. For ``.index`` / ``.timeindex`` files: one line per entry (stopping at the first unused
preallocated entry, as Kafka's tool does). For a ``.txnindex`` file (aborted transactions): one
line per entry, then its sanity check. A directory stands for its ``.log`` files in order.

``--verify-index`` checks each segment's indexes against its log: every offset index entry must
point at the start of the batch whose last offset it names, every time index entry must name the
last offset and max timestamp of a batch, and both must pass their sanity checks.

Problems found (CRC mismatch, torn or malformed batch, offsets going backwards, undecodable
records, index mismatches, a transaction index failing its sanity check) are printed and make
the exit status 1.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from runtime.log.errors import CorruptIndexError, CorruptSnapshotError
from runtime.log.file_batches import FileBatches
from runtime.log.offset_index import OffsetIndex
from runtime.log.producer_snapshot import SNAPSHOT_SUFFIX, read_snapshot_file
from runtime.log.producer_state import decrement_sequence, increment_sequence
from runtime.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_from_file_name,
)
from runtime.log.time_index import TimeIndex
from runtime.log.transaction_index import CURRENT_VERSION, TransactionIndex
from wire.record_reader import iter_records
from wire.records import BatchHeader, CorruptRecordError, validate_batch

EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_USAGE = 2


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _describe_batch(position: int, header: BatchHeader, valid: bool) -> str:
    last_sequence = (
        -1
        if header.base_sequence < 0
        else increment_sequence(header.base_sequence, header.last_offset_delta)
    )
    time_kind = "LogAppendTime" if header.timestamp_type else "CreateTime"
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} position: {position} "
        f"{time_kind}: {header.max_timestamp} size: {header.size_bytes} magic: {header.magic} "
        f"compresscodec: {header.compression.name.lower()} crc: {header.crc} "
        f"isvalid: {_bool(valid)}"
    )


def _show(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


class _Dumper:
    def __init__(self, out: TextIO, *, deep: bool, verify_index: bool) -> None:
        self.out = out
        self.deep = deep
        self.verify_index = verify_index
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(text)
        print(f"CORRUPTION: {text}", file=self.out)

    def dump(self, path: Path) -> None:
        if path.is_dir():
            logs = sorted(p for p in path.iterdir() if p.name.endswith(LOG_SUFFIX))
            for log_path in logs:
                self.dump(log_path)
            return
        print(f"Dumping {path}", file=self.out)
        if path.name.endswith(LOG_SUFFIX):
            self.dump_log(path)
            if self.verify_index:
                self.verify_indexes(path)
        elif path.name.endswith(INDEX_SUFFIX):
            self.dump_offset_index(path)
            if self.verify_index:
                self.verify_indexes(_sibling(path, INDEX_SUFFIX, LOG_SUFFIX))
        elif path.name.endswith(TIME_INDEX_SUFFIX):
            self.dump_time_index(path)
            if self.verify_index:
                self.verify_indexes(_sibling(path, TIME_INDEX_SUFFIX, LOG_SUFFIX))
        elif path.name.endswith(TXN_INDEX_SUFFIX):
            self.dump_txn_index(path)
        elif path.name.endswith(SNAPSHOT_SUFFIX):
            self.dump_producer_snapshot(path)
        else:
            self.problem(f"{path}: not a .log, .index, .timeindex, .txnindex or .snapshot file")

    def _batches(self, path: Path) -> Iterable[tuple[int, BatchHeader, bytes]]:
        """Walk batches by their headers; CRC and records are judged per batch by the caller."""
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            scan = FileBatches(fd, 0, size, validate=False)
            for position, header, _ in scan:
                yield position, header, os.pread(fd, header.size_bytes, position)
            if scan.error is not None:
                self.problem(f"{path}: {scan.error} at byte {scan.error_position}")
        finally:
            os.close(fd)

    def dump_log(self, path: Path) -> None:
        print(f"Log starting offset: {_base_offset(path)}", file=self.out)
        next_offset = None
        for position, header, batch in self._batches(path):
            try:
                validate_batch(batch)
                valid = True
            except CorruptRecordError as exc:
                valid = False
                self.problem(f"{path}: batch at byte {position}: {exc}")
            print(_describe_batch(position, header, valid), file=self.out)
            if next_offset is not None and header.base_offset < next_offset:
                self.problem(
                    f"{path}: batch at byte {position} starts at offset {header.base_offset}, "
                    f"below the previous batch's end {next_offset}"
                )
            next_offset = header.next_offset
            if self.deep:
                self.dump_records(path, position, batch)

    def dump_records(self, path: Path, position: int, batch: bytes) -> None:
        try:
            for record in iter_records(batch, verify_crc=False):
                keys = ",".join(key for key, _ in record.headers)
                key_size = -1 if record.key is None else len(record.key)
                value_size = -1 if record.value is None else len(record.value)
                print(
                    f"| offset: {record.offset} timestamp: {record.timestamp} "
                    f"keySize: {key_size} valueSize: {value_size} headerKeys: [{keys}] "
                    f"key: {_show(record.key)} payload: {_show(record.value)}",
                    file=self.out,
                )
        except CorruptRecordError as exc:
            self.problem(f"{path}: records of batch at byte {position}: {exc}")

    def dump_producer_snapshot(self, path: Path) -> None:
        """One line per producer, in the fields of Kafka's tool for ``.snapshot`` files."""
        try:
            entries = read_snapshot_file(path)
        except CorruptSnapshotError as exc:
            self.problem(str(exc))
            return
        for e in entries:
            first_sequence = (
                -1 if e.last_sequence < 0 else decrement_sequence(e.last_sequence, e.offset_delta)
            )
            print(
                f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
                f"coordinatorEpoch: {e.coordinator_epoch} "
                f"currentTxnFirstOffset: {e.current_txn_first_offset} "
                f"lastTimestamp: {e.timestamp} firstSequence: {first_sequence} "
                f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}",
                file=self.out,
            )

    def dump_offset_index(self, path: Path) -> None:
        index = OffsetIndex(path, _base_offset(path), 1)
        for slot in range(_used_offset_entries(index)):
            entry = index.entry_at(slot)
            print(f"offset: {entry.offset} position: {entry.position}", file=self.out)

    def dump_time_index(self, path: Path) -> None:
        index = TimeIndex(path, _base_offset(path), 1)
        for slot in range(_used_time_entries(index)):
            entry = index.entry_at(slot)
            print(f"timestamp: {entry.timestamp} offset: {entry.offset}", file=self.out)

    def dump_txn_index(self, path: Path) -> None:
        """One line per aborted transaction, in the fields of Kafka's tool; the entries before
        an undecodable one are printed, then the problem."""
        index = TransactionIndex(path, _base_offset(path))
        try:
            for entry in index.iter_entries():
                print(
                    f"version: {CURRENT_VERSION} producerId: {entry.producer_id} "
                    f"firstOffset: {entry.first_offset} lastOffset: {entry.last_offset} "
                    f"lastStableOffset: {entry.last_stable_offset}",
                    file=self.out,
                )
            index.sanity_check()
        except CorruptIndexError as exc:
            self.problem(str(exc))
        finally:
            index.close()

    def verify_indexes(self, log_path: Path) -> None:
        if not log_path.exists():
            self.problem(f"{log_path}: missing, cannot verify its indexes")
            return
        by_position: dict[int, BatchHeader] = {}
        by_last_offset: dict[int, BatchHeader] = {}
        for position, header, _ in self._batches(log_path):
            by_position[position] = header
            by_last_offset[header.last_offset] = header
        base = _base_offset(log_path)
        index = OffsetIndex(_sibling(log_path, LOG_SUFFIX, INDEX_SUFFIX), base, 1)
        time_index = TimeIndex(_sibling(log_path, LOG_SUFFIX, TIME_INDEX_SUFFIX), base, 1)
        for checked in (index, time_index):
            if not checked.path.exists():
                self.problem(f"{checked.path}: missing")
        previous = None
        entries = [index.entry_at(slot) for slot in range(_used_offset_entries(index))]
        positions = sorted(by_position)
        for slot, entry in enumerate(entries):
            # An entry names the last offset of one append and the position of that append's
            # first batch: a leader appends one batch at a time, a follower several, so the
            # offset must end one of the batches from that position up to the next entry's.
            at = by_position.get(entry.position)
            until = entries[slot + 1].position if slot + 1 < len(entries) else None
            ends = {
                by_position[p].last_offset
                for p in positions
                if p >= entry.position and (until is None or p < until)
            }
            if at is None or entry.offset not in ends:
                found = "no batch" if at is None else f"last offset {at.last_offset}"
                self.problem(
                    f"{index.path}: entry {entry.offset} -> byte {entry.position}, "
                    f"but the log has {found} there"
                )
            if previous is not None and entry.offset <= previous:
                self.problem(f"{index.path}: entry {entry.offset} after {previous}")
            previous = entry.offset
        previous_ts = None
        for slot in range(_used_time_entries(time_index)):
            ts_entry = time_index.entry_at(slot)
            holder = by_last_offset.get(ts_entry.offset)
            if holder is None or holder.max_timestamp != ts_entry.timestamp:
                self.problem(
                    f"{time_index.path}: entry ({ts_entry.timestamp}, {ts_entry.offset}) "
                    f"matches no batch's (max timestamp, last offset)"
                )
            if previous_ts is not None and ts_entry.timestamp <= previous_ts:
                self.problem(f"{time_index.path}: timestamp {ts_entry.timestamp} not increasing")
            previous_ts = ts_entry.timestamp
        print(
            f"Index check of {log_path.name}: {_used_offset_entries(index)} offset entries, "
            f"{_used_time_entries(time_index)} time entries",
            file=self.out,
        )


def _used_offset_entries(index: OffsetIndex) -> int:
    """Entries before the preallocated tail (the first all-zero entry; no real entry points at
    position 0)."""
    for slot in range(index.entries):
        entry = index.entry_at(slot)
        if entry.offset == index.base_offset and entry.position == 0:
            return slot
    return index.entries


def _used_time_entries(index: TimeIndex) -> int:
    for slot in range(index.entries):
        entry = index.entry_at(slot)
        if entry.timestamp == 0 and entry.offset == index.base_offset:
            return slot
    return index.entries


def _base_offset(path: Path) -> int:
    try:
        return offset_from_file_name(path.name)
    except ValueError:
        return 0


def _sibling(path: Path, old: str, new: str) -> Path:
    return path.with_name(path.name[: len(path.name) - len(old)] + new)


def dump_log_files(
    paths: Iterable[Path], out: TextIO, *, deep: bool = False, verify_index: bool = False
) -> int:
    """Dump `paths`; returns the exit status (1 when any corruption was found)."""
    dumper = _Dumper(out, deep=deep, verify_index=verify_index)
    for path in paths:
        if not path.exists():
            dumper.problem(f"{path}: no such file or directory")
            continue
        dumper.dump(path)
    return EXIT_CORRUPT if dumper.problems else EXIT_OK
