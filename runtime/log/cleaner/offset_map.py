"""The live cleaner's key -> latest offset map (Kafka's OffsetMap), bounded in memory.

`build_offset_map` reads the source segments of one cleaning (a prefix of a partition's log,
`runtime.log.cleaner.task`) batch by batch and keeps, per key, the highest offset seen: the
survivors `runtime.log.cleaner.write` keeps. Control batches and the batches of aborted
transactions never count (an aborted record must not hide an older committed one); a record
without a key is a `CompactError`, as for the offline job.

Aborted transactions come from the broker's own transaction index (the `AbortedTxn` entries
the planner collected on the log owner's task, `Log.collect_aborted_transactions`), as Kafka's
cleaner takes them: a transactional data batch of producer P is aborted when an entry of P
spans its base offset. `txn.TransactionScan` (the offline job's way) would have to scan past the
cleaned range for the markers; the offline job (`offline.compact_task`), which has made that
scan while planning, passes the base offsets it found as ``aborted_batches`` instead.

Memory bound (``log.cleaner.dedupe.buffer.size``). Keys are held as 16-byte BLAKE2b digests,
as Kafka's SkimpyOffsetMap holds MD5s (a collision, about 2^-64 for 2^32 keys, would let one
key's record hide another's: Kafka accepts the same risk); a key shorter than a digest is held
as it is, which is no bigger, costs no hashing, and cannot equal any digest (the lengths
differ). Records are read for their offsets and keys only (`wire.record_reader.iter_keys`;
`python -m bench.cleaner --mb 32` ran the whole pass at 27-45 MiB/s with it against 17-18 MiB/s
reading whole records, back to back on a loaded machine). The map holds at most
`CleanerConfig.max_map_entries` of them (the buffer at the load factor, 24 bytes an entry,
counted as Kafka counts it; a Python dict takes several times that per entry). When a segment's
new keys would not fit, the pass stops before that segment and cleans the prefix of whole
segments that fit (Kafka also cleans a prefix, though it may stop inside a segment); the next
pass goes on from there. When not even the first segment fits, the partition cannot be cleaned
with this buffer: `CompactError`, and the manager marks it uncleanable.

One difference from Kafka: the map covers the whole cleaned range, from the log's first
segment, not only its dirty part, because the shared writer keeps an explicit survivor list. In
a compacted log the clean part holds mostly distinct keys, so the bound counts them too.

Runs in the cleaner's worker thread over files it only reads; owns everything it builds.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from runtime.log.cleaner.source import CompactError, SourceSegment
from runtime.log.file_batches import FileBatches
from runtime.log.segment import LOG_SUFFIX, file_name_prefix
from runtime.log.transaction_index import AbortedTxn
from wire.record_reader import iter_keys
from wire.records import BatchHeader

_DIGEST_BYTES = 16


def _map_key(key: bytes) -> bytes:
    """What the map holds for `key` (module docstring: short keys as they are)."""
    if len(key) < _DIGEST_BYTES:
        return key
    return hashlib.blake2b(key, digest_size=_DIGEST_BYTES).digest()


@dataclass(frozen=True, slots=True)
class OffsetMapResult:
    """What a pass cleans: `sources` (a prefix of the planned ones), the survivor offsets in it
    (ascending), the base offsets of its aborted batches, and how full the map got."""

    sources: tuple[SourceSegment, ...]
    survivors: list[int]
    aborted_batches: frozenset[int]
    entries: int
    max_entries: int
    cut_short: bool  # the map was full: `sources` is shorter than planned

    @property
    def buffer_utilization(self) -> float:
        return self.entries / self.max_entries


class _AbortedRanges:
    """Per producer, the offset ranges of its aborted transactions; and base offsets of
    aborted batches known as such (the offline plan's)."""

    def __init__(self, aborted: Iterable[AbortedTxn], batches: AbstractSet[int]) -> None:
        self._batches = batches
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for txn in aborted:
            self._by_producer.setdefault(txn.producer_id, []).append(
                (txn.first_offset, txn.last_offset)
            )

    def covers(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        if header.base_offset in self._batches:
            return True
        ranges = self._by_producer.get(header.producer_id)
        return ranges is not None and any(
            first <= header.base_offset <= last for first, last in ranges
        )


def _segment_keys(
    directory: Path, source: SourceSegment, aborted: _AbortedRanges, aborted_out: set[int]
) -> dict[bytes, int]:
    """Digest -> latest offset of one segment's records (read up to its planned size)."""
    path = directory / f"{file_name_prefix(source.base_offset)}{LOG_SUFFIX}"
    latest: dict[bytes, int] = {}
    fd = os.open(path, os.O_RDONLY)
    try:
        scan = FileBatches(fd, 0, source.size_bytes, validate=True)
        for _, header, batch in scan:
            assert batch is not None  # validate=True yields the bytes
            if header.is_control:
                continue
            if aborted.covers(header):
                aborted_out.add(header.base_offset)
                continue
            for offset, key in iter_keys(batch):  # CRC checked by the scan
                if key is None:
                    raise CompactError(
                        f"{path}: a record without a key at offset {offset}; a compacted "
                        "topic needs a key on every record"
                    )
                latest[_map_key(key)] = offset
        if scan.error is not None:
            raise CompactError(f"{path}: {scan.error} at byte {scan.error_position}")
    finally:
        os.close(fd)
    return latest


def build_offset_map(
    directory: Path,
    sources: Sequence[SourceSegment],
    aborted: Iterable[AbortedTxn],
    max_entries: int,
    *,
    aborted_batches: AbstractSet[int] = frozenset(),
) -> OffsetMapResult:
    """The survivors of the longest prefix of `sources` whose keys fit `max_entries` (see the
    module docstring); raises CompactError when not even the first segment fits. A data batch
    is aborted when an entry of `aborted` spans it or its base offset is in `aborted_batches`."""
    ranges = _AbortedRanges(aborted, aborted_batches)
    offsets: dict[bytes, int] = {}
    found_aborted: set[int] = set()
    taken = 0
    for source in sources:
        segment_aborted: set[int] = set()
        keys = _segment_keys(directory, source, ranges, segment_aborted)
        new_keys = sum(1 for digest in keys if digest not in offsets)
        if len(offsets) + new_keys > max_entries:
            break
        offsets.update(keys)  # a later segment's offsets are higher: they win
        found_aborted |= segment_aborted
        taken += 1
    chosen = list(sources[:taken])
    while chosen and chosen[-1].next_offset == chosen[-1].base_offset:
        chosen.pop()  # an empty segment cannot end the range (`write_cleaned_partition`)
    if taken == 0 and sources:
        raise CompactError(
            f"{directory}: segment {sources[0].base_offset} holds more keys than "
            f"log.cleaner.dedupe.buffer.size maps ({max_entries})"
        )
    return OffsetMapResult(
        tuple(chosen),
        sorted(offsets.values()),
        frozenset(found_aborted),
        len(offsets),
        max_entries,
        cut_short=taken < len(sources),
    )
