"""The controller's metadata log: durability, group commit, snapshots, torn tails, corruption."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from runtime.log.errors import LogDirLockedError
from runtime.log.metadata_log import MetadataLog, MetadataLogCorruptError, MetadataLogFailedError
from runtime.log.metadata_log_format import LOCK_FILE, Record, segment_name, snapshot_name

SEED = 20261122


def rec(i: int) -> Record:
    return {"type": "topic", "name": f"t{i}", "partitions": i % 7, "id": bytes([i % 256]) * 16}


def loaded(directory: Path, **kwargs: Any) -> tuple[MetadataLog, list[Record], int]:
    log = MetadataLog(directory, **kwargs)
    records, next_offset = log.load()
    return log, records, next_offset


def segment_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix == ".log")


def snapshot_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix == ".snapshot")


async def test_round_trip(tmp_path: Path) -> None:
    log, records, next_offset = loaded(tmp_path)
    assert (records, next_offset) == ([], 0)
    assert await log.append([rec(0)]) == 0
    assert await log.append([rec(1), rec(2), rec(3)]) == 3
    assert await log.append([rec(4)]) == 4
    assert log.next_offset == 5
    assert log.writes == 3
    await log.close()

    log, records, next_offset = loaded(tmp_path)
    assert records == [rec(i) for i in range(5)]
    assert next_offset == 5
    assert log.torn_tail_truncations == 0
    assert await log.append([rec(5)]) == 5
    await log.close()
    _, records, next_offset = loaded(tmp_path)
    assert records == [rec(i) for i in range(6)]
    assert next_offset == 6


async def test_concurrent_appends_share_one_write_in_call_order(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path)
    await log.append([rec(0)])
    writes_before = log.writes
    results = await asyncio.gather(*(log.append([rec(i), rec(i + 100)]) for i in range(1, 11)))
    # Each commit gets its offsets when it is called; all ten are queued before the worker
    # runs, so they go out as one frame and one fsync.
    assert results == [2 * i for i in range(1, 11)]
    assert log.writes - writes_before == 1
    assert log.commits == 11
    await log.close()
    _, records, next_offset = loaded(tmp_path)
    expected = [rec(0)] + [r for i in range(1, 11) for r in (rec(i), rec(i + 100))]
    assert records == expected
    assert next_offset == 21


async def test_segments_roll_and_replay_across_them(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path, segment_bytes=200)
    for i in range(30):
        await log.append([rec(i)])
    assert len(log.segment_bases) > 3
    assert segment_files(tmp_path) == [segment_name(b) for b in log.segment_bases]
    await log.close()
    _, records, next_offset = loaded(tmp_path, segment_bytes=200)
    assert records == [rec(i) for i in range(30)]
    assert next_offset == 30


async def test_snapshot_then_replay_and_covered_segments_deleted(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path, segment_bytes=200)
    for i in range(20):
        await log.append([rec(i)])
    state = [{"type": "state", "count": 20}]
    assert log.records_since_snapshot == 20
    await log.snapshot(state, 19)
    assert log.records_since_snapshot == 0
    # Snapshot at the end: the active segment was rolled, so every old segment is covered.
    assert segment_files(tmp_path) == [segment_name(20)]
    assert snapshot_files(tmp_path) == [snapshot_name(20)]
    for i in range(20, 25):
        await log.append([rec(i)])
    await log.close()

    log, records, next_offset = loaded(tmp_path, segment_bytes=200)
    assert records == state + [rec(i) for i in range(20, 25)]
    assert next_offset == 25
    assert log.records_since_snapshot == 5

    # A second snapshot in the middle of the active segment replaces the first and keeps
    # the records after it.
    await log.snapshot([{"type": "state", "count": 23}], 22)
    assert snapshot_files(tmp_path) == [snapshot_name(23)]
    await log.close()
    _, records, next_offset = loaded(tmp_path, segment_bytes=200)
    assert records == [{"type": "state", "count": 23}, rec(23), rec(24)]
    assert next_offset == 25


async def test_snapshot_waits_for_queued_commits_and_checks_its_offset(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path)
    pending = [asyncio.ensure_future(log.append([rec(i)])) for i in range(3)]
    await asyncio.sleep(0)  # the appends have their offsets, the worker has not written yet
    await log.snapshot([{"type": "state"}], 2)
    assert [f.result() for f in pending] == [0, 1, 2]
    with pytest.raises(ValueError, match="outside"):
        await log.snapshot([], 3)  # not appended yet
    with pytest.raises(ValueError, match="outside"):
        await log.snapshot([], 0)  # older than the latest snapshot
    await log.close()
    _, records, next_offset = loaded(tmp_path)
    assert (records, next_offset) == ([{"type": "state"}], 3)


async def test_crash_before_deleting_covered_segments(tmp_path: Path) -> None:
    live = tmp_path / "live"
    log, _, _ = loaded(live, segment_bytes=150)
    for i in range(12):
        await log.append([rec(i)])
    before = {p.name: p.read_bytes() for p in live.iterdir() if p.suffix == ".log"}
    await log.snapshot([{"type": "state"}], 7)
    await log.close()
    # Put back the segments the snapshot deleted, as if the process died right after the rename.
    for name, data in before.items():
        path = live / name
        if not path.exists():
            path.write_bytes(data)
    log, records, next_offset = loaded(live, segment_bytes=150)
    assert records == [{"type": "state"}] + [rec(i) for i in range(8, 12)]
    assert next_offset == 12
    # The next snapshot deletes the leftovers.
    await log.snapshot([{"type": "state2"}], 11)
    assert segment_files(live) == [segment_name(12)]
    await log.close()


async def build_three_commits(directory: Path) -> tuple[int, int]:
    """Three commits in one segment; (start, end) byte positions of the last frame."""
    log, _, _ = loaded(directory)
    await log.append([rec(0)])
    await log.append([rec(1), rec(2)])
    start = (directory / segment_name(0)).stat().st_size
    await log.append([rec(3)])
    end = (directory / segment_name(0)).stat().st_size
    await log.close()
    return start, end


async def test_torn_tail_at_every_byte_of_the_last_frame(tmp_path: Path) -> None:
    source = tmp_path / "source"
    start, end = await build_three_commits(source)
    assert end - start > 8
    for cut in range(start, end):
        directory = tmp_path / f"cut-{cut}"
        shutil.copytree(source, directory)
        os.truncate(directory / segment_name(0), cut)
        log, records, next_offset = loaded(directory)
        assert records == [rec(0), rec(1), rec(2)], cut
        assert next_offset == 3, cut
        assert log.torn_tail_truncations == (1 if cut > start else 0), cut
        assert log.truncated_bytes == cut - start, cut
        assert (directory / segment_name(0)).stat().st_size == start, cut
        # The log goes on from the truncation point.
        assert await log.append([rec(99)]) == 3
        await log.close()
        _, records, next_offset = loaded(directory)
        assert records == [rec(0), rec(1), rec(2), rec(99)], cut
        assert next_offset == 4, cut
        shutil.rmtree(directory)


async def test_garbage_tail_is_truncated(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    source = tmp_path / "source"
    start, end = await build_three_commits(source)
    cases: dict[str, bytes] = {
        "zeros appended": bytes(4096),
        "random bytes appended": rng.randbytes(100),
    }
    for name, tail in cases.items():
        directory = tmp_path / name.replace(" ", "-")
        shutil.copytree(source, directory)
        with (directory / segment_name(0)).open("ab") as f:
            f.write(tail)
        log, records, next_offset = loaded(directory)
        assert records == [rec(i) for i in range(4)], (name, SEED)
        assert (log.torn_tail_truncations, log.truncated_bytes) == (1, len(tail)), (name, SEED)
        await log.close()
    for trial in range(20):
        # The last frame's bytes partly overwritten (a write that reached the disk in part).
        directory = tmp_path / f"scrambled-{trial}"
        shutil.copytree(source, directory)
        path = directory / segment_name(0)
        data = bytearray(path.read_bytes())
        pos = rng.randrange(start, end)
        data[pos] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(data))
        log, records, next_offset = loaded(directory)
        assert (records, next_offset) == ([rec(0), rec(1), rec(2)], 3), (trial, pos, SEED)
        assert log.torn_tail_truncations == 1, (trial, pos, SEED)
        await log.close()


async def test_corruption_before_a_valid_frame_is_an_error(tmp_path: Path) -> None:
    source = tmp_path / "source"
    start, _ = await build_three_commits(source)
    for pos in (0, 4, 9, start - 1):  # length, crc, body of the first frame, end of the second
        directory = tmp_path / f"flip-{pos}"
        shutil.copytree(source, directory)
        path = directory / segment_name(0)
        data = bytearray(path.read_bytes())
        data[pos] ^= 0x40
        path.write_bytes(bytes(data))
        with pytest.raises(MetadataLogCorruptError, match="followed by a valid frame"):
            MetadataLog(directory).load()
        # Nothing was truncated, and the failed load released the directory.
        assert path.read_bytes() == bytes(data)
        with pytest.raises(MetadataLogCorruptError):
            MetadataLog(directory).load()


async def test_damage_with_more_than_a_frame_after_it_is_an_error(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path, max_frame_bytes=120)
    for i in range(6):
        await log.append([rec(i)])
    await log.close()
    path = tmp_path / segment_name(0)
    data = bytearray(path.read_bytes())
    data[0] = 0xFF  # the first frame's length: nothing after it can be trusted
    path.write_bytes(bytes(data))
    with pytest.raises(MetadataLogCorruptError, match="more than one frame"):
        MetadataLog(tmp_path, max_frame_bytes=120).load()


async def test_corruption_in_an_earlier_segment_is_an_error(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path, segment_bytes=100)
    for i in range(10):
        await log.append([rec(i)])
    bases = log.segment_bases
    await log.close()
    assert len(bases) >= 3
    path = tmp_path / segment_name(bases[0])
    os.truncate(path, path.stat().st_size - 1)  # an earlier segment's tail is not a torn write
    with pytest.raises(MetadataLogCorruptError, match="not the last one"):
        MetadataLog(tmp_path, segment_bytes=100).load()


async def test_missing_segment_is_an_error(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path, segment_bytes=100)
    for i in range(10):
        await log.append([rec(i)])
    bases = log.segment_bases
    await log.close()
    (tmp_path / segment_name(bases[1])).unlink()
    with pytest.raises(MetadataLogCorruptError, match="starts at"):
        MetadataLog(tmp_path, segment_bytes=100).load()
    (tmp_path / segment_name(bases[0])).unlink()
    with pytest.raises(MetadataLogCorruptError, match="missing"):
        MetadataLog(tmp_path, segment_bytes=100).load()


async def test_corrupt_snapshot_falls_back_when_the_log_still_covers_it(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path)
    for i in range(6):
        await log.append([rec(i)])
    await log.snapshot([{"type": "state"}], 3)  # mid-segment: nothing deleted
    await log.close()
    path = tmp_path / snapshot_name(4)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    log, records, next_offset = loaded(tmp_path)
    assert records == [rec(i) for i in range(6)]
    assert next_offset == 6
    assert log.corrupt_snapshots == 1
    await log.close()


async def test_corrupt_snapshot_whose_segments_are_gone_is_an_error(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path, segment_bytes=100)
    for i in range(8):
        await log.append([rec(i)])
    await log.snapshot([{"type": "state"}], 7)
    await log.close()
    path = tmp_path / snapshot_name(8)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(MetadataLogCorruptError, match="missing"):
        MetadataLog(tmp_path, segment_bytes=100).load()


async def test_stale_snapshot_tmp_is_ignored(tmp_path: Path) -> None:
    log, _, _ = loaded(tmp_path)
    await log.append([rec(0)])
    await log.close()
    (tmp_path / (snapshot_name(1) + ".tmp")).write_bytes(b"half a snapshot")
    log, records, _ = loaded(tmp_path)
    assert records == [rec(0)]
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
    await log.close()


async def test_directory_lock(tmp_path: Path) -> None:
    first, _, _ = loaded(tmp_path)
    second = MetadataLog(tmp_path)
    with pytest.raises(LogDirLockedError):
        second.load()
    assert (tmp_path / LOCK_FILE).exists()
    await first.append([rec(0)])
    await first.close()
    records, next_offset = second.load()
    assert (records, next_offset) == ([rec(0)], 1)
    await second.close()


async def test_usage_errors(tmp_path: Path) -> None:
    log = MetadataLog(tmp_path)
    with pytest.raises(RuntimeError, match="load"):
        await log.append([rec(0)])
    log.load()
    with pytest.raises(RuntimeError, match="once"):
        log.load()
    with pytest.raises(ValueError, match="at least one"):
        await log.append([])
    with pytest.raises(TypeError, match="dict"):
        await log.append([["not", "a", "dict"]])  # type: ignore[list-item]
    small = MetadataLog(tmp_path / "small", max_frame_bytes=100)
    small.load()
    with pytest.raises(ValueError, match="max_frame_bytes"):
        await small.append([{"blob": bytes(200)}])
    await small.close()
    await log.close()
    with pytest.raises(MetadataLogFailedError, match="closed"):
        await log.append([rec(0)])


async def test_write_failure_fails_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, _, _ = loaded(tmp_path)
    await log.append([rec(0)])

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    first = asyncio.ensure_future(log.append([rec(1)]))
    second = asyncio.ensure_future(log.append([rec(2)]))
    for future in (first, second):
        with pytest.raises(MetadataLogFailedError, match="Input/output"):
            await future
    with pytest.raises(MetadataLogFailedError):
        await log.append([rec(3)])
    monkeypatch.undo()
    await log.close()
    # What reached the disk before the failed fsync may be replayed; nothing acknowledged is lost.
    _, records, _ = loaded(tmp_path)
    assert records[0] == rec(0)
