from __future__ import annotations

import io
import struct
import warnings
from pathlib import Path

import pytest

from cli.main import main
from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.dump import dump_log_files
from runtime.log.log import Log
from runtime.log.transaction_index import AbortedTxn, TransactionIndex
from wire.batch_builder import build_batch
from wire.records import iter_batches

from .helpers import WALL_MS, batch

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import, not ours
    from kafka.record.default_records import DefaultRecordBatchBuilder

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100)


def ketch_log(directory: Path, clock: ManualClock) -> Log:
    log = Log.open(directory, CONFIG, clock)
    for i in range(12):
        log.append_as_leader(batch(3, ts=WALL_MS + i, tag=i), leader_epoch=4)
    log.close()
    return log


def kafka_python_segment(path: Path) -> None:
    """A segment file written with kafka-python's encoder: offsets 0..8 in three batches, the
    middle one gzip-compressed. The producer numbers records from 0, so each batch's base offset
    is set afterwards at bytes 0-8, as a broker does (outside the CRC)."""
    data = b""
    for first, codec in ((0, 0), (3, 1), (6, 0)):
        builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
        for delta in range(3):
            offset = first + delta
            value = b"val%d" % offset + b"." * 200
            builder.append(delta, WALL_MS + offset, b"key%d" % offset, value, [])
        built = bytearray(builder.build())
        struct.pack_into(">q", built, 0, first)
        data += bytes(built)
    path.write_bytes(data)


def dump(*paths: Path, deep: bool = False, verify_index: bool = False) -> tuple[int, str]:
    out = io.StringIO()
    code = dump_log_files(list(paths), out, deep=deep, verify_index=verify_index)
    return code, out.getvalue()


def test_dump_ketch_log_dir_with_index_verification(tmp_path: Path, clock: ManualClock) -> None:
    log = ketch_log(tmp_path / "t-0", clock)
    code, text = dump(log.directory, deep=True, verify_index=True)
    assert code == 0, text
    assert text.count("baseOffset:") == 12
    assert "baseOffset: 0 lastOffset: 2 count: 3" in text
    assert "partitionLeaderEpoch: 4" in text
    assert "isvalid: true" in text
    assert "| offset: 35 timestamp: 1700000000011" in text
    assert "CORRUPTION" not in text


def test_dump_index_files(tmp_path: Path, clock: ManualClock) -> None:
    log = ketch_log(tmp_path / "t-0", clock)
    index = log.segments[0].offset_index.path
    code, text = dump(index, index.with_suffix(".timeindex"))
    assert code == 0, text
    assert "offset: " in text
    assert "position: " in text
    assert "timestamp: 1700000000" in text


def test_dump_segment_written_by_kafka_python(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "kp-0"
    directory.mkdir()
    segment = directory / "00000000000000000000.log"
    kafka_python_segment(segment)
    code, text = dump(segment, deep=True)
    assert code == 0, text
    assert "compresscodec: gzip" in text
    assert "| offset: 4 timestamp: 1700000000004 keySize: 4 valueSize: 204" in text
    assert "key: key8 payload: val8...." in text
    # Loading it as a ketch log builds its indexes; then they verify too.
    log = Log.open(directory, CONFIG, clock)
    assert log.log_end_offset == 9
    log.close()
    code, text = dump(segment, verify_index=True)
    assert code == 0, text


def test_corruption_exits_non_zero(tmp_path: Path, clock: ManualClock) -> None:
    log = ketch_log(tmp_path / "t-0", clock)
    segment = log.segments[0].log_path
    raw = bytearray(segment.read_bytes())
    raw[100] ^= 0x40
    segment.write_bytes(bytes(raw))
    code, text = dump(segment)
    assert code == 1
    assert "isvalid: false" in text
    assert "CRC mismatch" in text
    with open(segment, "ab") as f:
        f.write(b"\x00" * 20)  # a torn tail
    code, text = dump(segment)
    assert code == 1
    assert "bad magic 0" in text


def test_a_follower_segment_with_multi_batch_appends_verifies(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A follower appends what one fetch brought (several batches) and indexes it once: the
    last offset of the whole append at the position of its first batch."""
    leader = ketch_log(tmp_path / "leader" / "t-0", clock)
    chunk = b"".join(s.log_path.read_bytes() for s in leader.segments)
    one_segment = LogConfig(segment_bytes=1 << 20, index_interval_bytes=100)
    follower = Log.open(tmp_path / "follower" / "t-0", one_segment, clock)
    cuts = [pos for pos, _ in iter_batches(chunk)][::4][1:]
    for start, end in zip([0, *cuts], [*cuts, len(chunk)], strict=True):
        follower.append_as_follower(chunk[start:end])  # 4 batches at a time
    follower.close()
    assert follower.segments[0].offset_index.entries > 1
    code, text = dump(follower.directory, verify_index=True)
    assert code == 0, text
    assert "CORRUPTION" not in text


def test_index_mismatch_is_reported(tmp_path: Path, clock: ManualClock) -> None:
    log = ketch_log(tmp_path / "t-0", clock)
    index = log.segments[0].offset_index.path
    raw = bytearray(index.read_bytes())
    assert len(raw) >= 8
    raw[3] += 1  # the first entry now names the wrong offset
    index.write_bytes(bytes(raw))
    code, text = dump(log.segments[0].log_path, verify_index=True)
    assert code == 1
    assert "but the log has last offset" in text


def test_cli_dump_log(
    tmp_path: Path, clock: ManualClock, capsys: pytest.CaptureFixture[str]
) -> None:
    log = ketch_log(tmp_path / "t-0", clock)
    assert main(["dump-log", "--deep", "--verify-index", str(log.segments[0].log_path)]) == 0
    assert "| offset: 0 " in capsys.readouterr().out
    assert main(["dump-log", str(tmp_path / "missing.log")]) == 1


def test_dump_producer_snapshot(tmp_path: Path, clock: ManualClock) -> None:
    """A ``.snapshot`` file: one line per producer with its last batch's sequences and offsets;
    a damaged one is reported as corruption."""
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG, clock)
    for sequence in (0, 3):
        records = [(b"k", b"v%d" % i) for i in range(3)]
        log.append_as_leader(
            build_batch(records, producer_id=42, producer_epoch=1, base_sequence=sequence),
            leader_epoch=0,
        )
    log.close()
    snapshot = directory / "00000000000000000006.snapshot"
    out = io.StringIO()
    assert dump_log_files([snapshot], out) == 0
    text = out.getvalue()
    assert "producerId: 42 producerEpoch: 1 " in text
    assert "firstSequence: 3 lastSequence: 5 lastOffset: 5 offsetDelta: 2" in text
    snapshot.write_bytes(snapshot.read_bytes()[:-3])
    out = io.StringIO()
    assert dump_log_files([snapshot], out) == 1
    assert "CORRUPTION" in out.getvalue()


def test_dump_txn_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``.txnindex`` file: one line per aborted transaction in Kafka's fields; a torn or
    malformed one prints the entries it can and a CORRUPTION line, and exits 1."""
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(path, 100)
    index.append(AbortedTxn(42, 90, 105, 106))
    index.append(AbortedTxn(7, 110, 120, 121))
    index.close()
    code, text = dump(path)
    assert code == 0, text
    assert text.splitlines()[1:] == [
        "version: 0 producerId: 42 firstOffset: 90 lastOffset: 105 lastStableOffset: 106",
        "version: 0 producerId: 7 firstOffset: 110 lastOffset: 120 lastStableOffset: 121",
    ]
    assert main(["dump-log", str(path)]) == 0
    assert "producerId: 7 " in capsys.readouterr().out
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00")  # a torn third entry
    code, text = dump(path)
    assert code == 1
    assert "producerId: 7 " in text
    assert "CORRUPTION: " in text
    assert "not a multiple of the entry size 34" in text
    raw = bytearray(path.read_bytes()[:68])
    raw[34:36] = b"\x00\x05"  # the second entry's version
    path.write_bytes(bytes(raw))
    code, text = dump(path)
    assert code == 1
    assert "producerId: 42 " in text
    assert "producerId: 7 " not in text
    assert "entry 1 has unknown version 5" in text
