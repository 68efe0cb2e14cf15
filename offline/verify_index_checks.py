"""The index checks of `ketch verify`: one segment's ``.index`` and ``.timeindex`` entries judged
against the batches the scan found in its ``.log``.

`segment_index_findings` runs inside the scan task when it holds a whole segment of a cleanly
shut down dir (the verify level of `offline.datasource`), else on the driver over the raw
entries the task sent back. Finding kinds: ``index_file`` (missing, or not whole entries),
``offset_index_entry`` (no batch starts at the entry's position, or that batch starts above the
entry's offset, or the offset lies past the segment's last), ``offset_index_order``,
``time_index_order`` (time or offset decreasing), ``time_index_entry`` (offset outside the
segment). The findings and batch rows are `offline.verify_checks`' types.

Pure functions over values they are given: nothing shared, no locks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from offline.verify_checks import HEADER_KINDS, NO_LIMIT, Finding, kind_of


class Located(Protocol):
    """What the index checks read of a batch: `BatchRow`, or the scan's own `ScannedBatch` in a
    task (no conversion per batch)."""

    @property
    def position(self) -> int: ...
    @property
    def base_offset(self) -> int | None: ...
    @property
    def last_offset(self) -> int | None: ...
    @property
    def reason(self) -> str | None: ...


class Entry(Protocol):
    """An index entry: `IndexRow`, or `offline.batch_scan.IndexEntry` in a task."""

    @property
    def kind(self) -> str: ...
    @property
    def slot(self) -> int: ...
    @property
    def offset(self) -> int | None: ...
    @property
    def position(self) -> int | None: ...
    @property
    def timestamp(self) -> int | None: ...
    @property
    def problem(self) -> str | None: ...


L = TypeVar("L", bound=Located)


class IndexRow(NamedTuple):
    """One entry of a segment's ``.index`` (kind ``offset``) or ``.timeindex`` (``time``); slot
    -1 with `problem` for a file-level problem (missing, not whole entries)."""

    kind: str
    slot: int
    offset: int | None
    position: int | None
    timestamp: int | None
    problem: str | None


def index_readable_rows(batches: Iterable[L]) -> list[L]:
    """The batches an index entry is judged against: every batch whose header was read, damaged
    ones included (an entry naming a torn or corrupt batch is right about where it is, and that
    batch is reported once, by its own kind)."""
    return [
        b
        for b in batches
        if (b.reason is None or kind_of(b.reason) in HEADER_KINDS) and b.last_offset is not None
    ]


def segment_index_findings(
    where: tuple[str, str, int, int],
    batches: Sequence[Located],
    entries: Iterable[Entry],
    limit: int = NO_LIMIT,
) -> list[Finding]:
    """The index checks of one segment (`where` = broker dir, topic, partition, segment):
    `batches` are its `index_readable_rows` batches, `entries` its index rows; entries at or
    above `limit` are not judged."""
    broker_dir, topic, partition, segment = where
    found: list[Finding] = []

    def finding(kind: str, offsets: tuple[int, int] | None, detail: str) -> Finding:
        return Finding(kind, broker_dir, topic, partition, segment, offsets, detail)

    base_at = {b.position: b.base_offset for b in batches}
    seg_last = max((b.last_offset for b in batches if b.last_offset is not None), default=None)
    by_kind: dict[str, list[Entry]] = {"offset": [], "time": []}
    for entry in entries:
        if entry.slot < 0:
            found.append(finding("index_file", None, entry.problem or ""))
        elif entry.offset is not None and entry.offset < limit:
            by_kind[entry.kind].append(entry)
    prev: Entry | None = None
    for e in sorted(by_kind["offset"], key=lambda e: e.slot):
        assert e.offset is not None
        assert e.position is not None
        batch_base = base_at.get(e.position)
        problems = []
        if batch_base is None:
            problems.append(("offset_index_entry", "no batch starts there"))
        elif batch_base > e.offset:
            problems.append(
                ("offset_index_entry", f"the batch there starts at offset {batch_base}")
            )
        elif seg_last is not None and e.offset > seg_last:
            problems.append(("offset_index_entry", f"the segment ends at offset {seg_last}"))
        if prev is not None:
            assert prev.offset is not None
            assert prev.position is not None
            if e.offset <= prev.offset or e.position <= prev.position:
                problems.append(
                    (
                        "offset_index_order",
                        f"not above the previous entry ({prev.offset} -> byte {prev.position})",
                    )
                )
        if problems:  # the entry's text only then: most entries are fine
            text = f"offset index slot {e.slot} ({e.offset} -> byte {e.position}): "
            found.extend(finding(kind, (e.offset, e.offset), text + why) for kind, why in problems)
        prev = e
    prev = None
    for e in sorted(by_kind["time"], key=lambda e: e.slot):
        assert e.offset is not None
        assert e.timestamp is not None
        text = f"time index slot {e.slot} ({e.timestamp}, offset {e.offset}): "
        if prev is not None:
            assert prev.offset is not None
            assert prev.timestamp is not None
            if e.timestamp < prev.timestamp or e.offset < prev.offset:
                found.append(
                    finding(
                        "time_index_order", (e.offset, e.offset),
                        text + f"goes back from ({prev.timestamp}, offset {prev.offset})",
                    )
                )  # fmt: skip
        if e.offset < segment or seg_last is None or e.offset > seg_last:
            found.append(
                finding(
                    "time_index_entry", (e.offset, e.offset),
                    text + "offset outside the segment's batches",
                )
            )  # fmt: skip
        prev = e
    return found
