"""Storage engine throughput: `Log` appends against the least work a validating append must do.

Measured in one run, on the same 16 KB batches (16 records of ~1 KB, uncompressed), in a
temporary directory on the same file system (``--dir`` to choose it):

* os_write: plain ``os.write`` of each batch to one file — the floor of any append.
* os_write_crc: the same plus CRC-32C of each batch (bytes 21..end, as validation does) — the
  least work of a validating append, and the baseline `Log.append_as_leader` is judged against
  (target: append >= 0.8x of it).
* append: `Log.append_as_leader` — structural check + CRC, offset and leader epoch patch, roll
  check, write, sparse index entries.
* append_idempotent: the same with each batch from one idempotent producer (its sequence
  advancing), so the producer state's check and update run on every append (issue 19), against
  append_distinct: the same distinct batches (each its own bytes in memory, as the idempotent
  ones must be) with no producer id. Both sets are prepared before the clock starts.
* read: sequential `Log.read` of 1 MB fetches over the whole log (page cache warm).
* recovery: reopening the log after a simulated crash with the recovery point at 0, so every
  batch is re-validated and every index rebuilt; reported as seconds per GB.
* crashed open: reopening a one-batch log whose active segment's indexes were left
  preallocated (10 MB each, Kafka's segment.index.bytes) by a crash, with nothing to recover,
  against the same log reopened after a clean close (indexes trimmed): the cost of the untrimmed
  indexes alone, which every partition of a broker pays at its start after a kill -9.

Each figure is the median of several rounds after a discarded warm-up round; the three write
measures take turns within each round. No fsync happens in
any of them (Kafka's default too: durability comes from replication), so these are CPU and page
cache figures. Run with ``python -m bench.storage [--mb 256] [--rounds 3] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from crc32c import crc32c
from rich.console import Console
from rich.table import Table

from runtime.clock import SystemClock
from runtime.log.config import LogConfig
from runtime.log.log import Log
from wire.batch_builder import build_batch

BATCH_BYTES = 16 * 1024
RECORDS_PER_BATCH = 16
READ_FETCH_BYTES = 1024 * 1024
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
MB = 1024 * 1024
GB = 1024 * MB


def make_batch() -> bytes:
    """An uncompressed batch of exactly 16 KB."""
    value_size = BATCH_BYTES // RECORDS_PER_BATCH - 16
    last_size = value_size
    for _ in range(8):  # varint lengths shift with the sizes; converge on 16 KB exactly
        records = [
            (b"key-%02d" % i, bytes([97 + i]) * (last_size if i == 15 else value_size))
            for i in range(RECORDS_PER_BATCH)
        ]
        data = build_batch(records, base_timestamp=1_700_000_000_000)
        if len(data) == BATCH_BYTES:
            return data
        last_size += BATCH_BYTES - len(data)
    raise AssertionError(f"cannot build a {BATCH_BYTES}-byte batch")


def _median_rate(run: Callable[[Path], float], workdir: Path, rounds: int) -> float:
    """Median of `rounds` results after one discarded warm-up; each round gets a fresh dir."""
    results = []
    for i in range(rounds + 1):
        directory = workdir / f"round-{i}"
        directory.mkdir()
        value = run(directory)
        shutil.rmtree(directory)
        if i:
            results.append(value)
    return statistics.median(results)


def bench_os_write(data: bytes, count: int, *, with_crc: bool) -> Callable[[Path], float]:
    view = memoryview(data)

    def run(directory: Path) -> float:
        fd = os.open(directory / "plain.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            start = time.perf_counter()
            for _ in range(count):
                if with_crc:
                    crc32c(view[21:])
                os.write(fd, data)
            elapsed = time.perf_counter() - start
        finally:
            os.close(fd)
        return count * len(data) / MB / elapsed

    return run


def _config() -> LogConfig:
    return LogConfig()  # Kafka's defaults: 1 GB segments, 4 KB index interval


def distinct_batches(data: bytes, count: int, *, idempotent: bool) -> list[bytes]:
    """`count` copies of `data`, each its own bytes; idempotent: as one producer's consecutive
    batches (producer id 1000, epoch 0, base sequence advancing by the record count, the CRC
    recomputed)."""
    batches = []
    for i in range(count):
        batch = bytearray(data)
        if idempotent:
            _PRODUCER_FIELDS.pack_into(batch, 43, 1000, 0, i * RECORDS_PER_BATCH)
            struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
        batches.append(bytes(batch))
    return batches


def bench_append_distinct(data: bytes, count: int, *, idempotent: bool) -> Callable[[Path], float]:
    batches = distinct_batches(data, count, idempotent=idempotent)

    def run(directory: Path) -> float:
        log = Log.open(directory / "bench-0", _config(), SystemClock())
        start = time.perf_counter()
        for batch in batches:
            log.append_as_leader(batch, 0)
        elapsed = time.perf_counter() - start
        assert log.log_end_offset == count * RECORDS_PER_BATCH
        log.close()
        return count * len(data) / MB / elapsed

    return run


def _fill(directory: Path, data: bytes, count: int) -> tuple[Log, float]:
    log = Log.open(directory / "bench-0", _config(), SystemClock())
    start = time.perf_counter()
    for _ in range(count):
        log.append_as_leader(data, 0)
    return log, time.perf_counter() - start


def bench_append(data: bytes, count: int) -> Callable[[Path], float]:
    def run(directory: Path) -> float:
        log, elapsed = _fill(directory, data, count)
        log.close()
        return count * len(data) / MB / elapsed

    return run


def bench_read(data: bytes, count: int) -> Callable[[Path], float]:
    def run(directory: Path) -> float:
        log, _ = _fill(directory, data, count)
        total = 0
        offset = 0
        start = time.perf_counter()
        while offset < log.log_end_offset:
            info = log.read(offset, READ_FETCH_BYTES)
            total += len(info.records)
            offset += RECORDS_PER_BATCH * (len(info.records) // len(data))
        elapsed = time.perf_counter() - start
        assert total == count * len(data), (total, count * len(data))
        log.close()
        return total / MB / elapsed

    return run


def bench_recovery(data: bytes, count: int) -> Callable[[Path], float]:
    def run(directory: Path) -> float:
        log, _ = _fill(directory, data, count)
        for segment in log.segments:
            segment.close_handles()  # a crash: nothing trimmed, no clean-shutdown marker
        start = time.perf_counter()
        reopened = Log.open(directory / "bench-0", _config(), SystemClock(), recovery_point=0)
        elapsed = time.perf_counter() - start
        assert reopened.log_end_offset == count * RECORDS_PER_BATCH
        assert reopened.recovery_report.truncation is None
        reopened.close()
        return elapsed / (count * len(data) / GB)

    return run


def bench_open(data: bytes, *, crashed: bool) -> Callable[[Path], float]:
    def run(directory: Path) -> float:
        log, _ = _fill(directory, data, 1)
        end = log.log_end_offset
        if crashed:
            for segment in log.segments:
                segment.close_handles()  # nothing trimmed, no clean-shutdown marker
        else:
            log.close()
        start = time.perf_counter()
        reopened = Log.open(directory / "bench-0", _config(), SystemClock(), recovery_point=end)
        elapsed = time.perf_counter() - start
        assert reopened.log_end_offset == end
        reopened.close()
        return elapsed * 1000

    return run


def _interleaved(
    runs: dict[str, Callable[[Path], float]], workdir: Path, rounds: int
) -> dict[str, float]:
    """Median per measure over `rounds`, the measures taking turns within each round (in a
    rotating order), so page cache write-back and a busy machine weigh on all of them alike."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i in range(rounds + 1):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            directory = workdir / f"{name}-{i}"
            directory.mkdir()
            value = runs[name](directory)
            shutil.rmtree(directory)
            if i:  # round 0 is the warm-up
                samples[name].append(value)
    return {name: statistics.median(values) for name, values in samples.items()}


def run_all(megabytes: int, rounds: int, workdir: Path) -> dict[str, float]:
    data = make_batch()
    assert len(data) == BATCH_BYTES, len(data)
    count = megabytes * MB // len(data)
    figures = _interleaved(
        {
            "append_mb_s": bench_append(data, count),
            "append_distinct_mb_s": bench_append_distinct(data, count, idempotent=False),
            "append_idempotent_mb_s": bench_append_distinct(data, count, idempotent=True),
            "os_write_mb_s": bench_os_write(data, count, with_crc=False),
            "os_write_crc_mb_s": bench_os_write(data, count, with_crc=True),
        },
        workdir,
        rounds,
    )
    figures["read_mb_s"] = _median_rate(bench_read(data, count), workdir, rounds)
    figures["recovery_s_per_gb"] = _median_rate(bench_recovery(data, count), workdir, rounds)
    opens = _interleaved(
        {
            "open_crashed_ms": bench_open(data, crashed=True),
            "open_clean_ms": bench_open(data, crashed=False),
        },
        workdir,
        max(rounds, 9),
    )
    return figures | opens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--mb", type=int, default=256, help="data per round (default 256 MB)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (median)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ketch-bench-") as tmp:
        figures = run_all(args.mb, args.rounds, Path(tmp))
    ratio = figures["append_mb_s"] / figures["os_write_crc_mb_s"]
    table = Table(title=f"storage: {args.mb} MB of 16 KB batches, median of {args.rounds}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("Log.append_as_leader", f"{figures['append_mb_s']:,.0f} MB/s")
    table.add_row(
        "Log.append_as_leader, idempotent producer",
        f"{figures['append_idempotent_mb_s']:,.0f} MB/s "
        f"({figures['append_idempotent_mb_s'] / figures['append_distinct_mb_s']:.2f}x of the "
        "same distinct batches without a producer id)",
    )
    table.add_row("os.write", f"{figures['os_write_mb_s']:,.0f} MB/s")
    table.add_row("os.write + crc32c (baseline)", f"{figures['os_write_crc_mb_s']:,.0f} MB/s")
    table.add_row("append / baseline", f"{ratio:.2f}x (target >= 0.80x)")
    table.add_row("Log.read (1 MB fetches)", f"{figures['read_mb_s']:,.0f} MB/s")
    table.add_row("recovery", f"{figures['recovery_s_per_gb']:.2f} s/GB")
    table.add_row(
        "open after a crash (untrimmed 10 MB indexes)",
        f"{figures['open_crashed_ms']:.2f} ms ({figures['open_clean_ms']:.2f} ms after a clean "
        "close)",
    )
    Console().print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
