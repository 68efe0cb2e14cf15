"""The live log cleaner's pass (issue 24): how fast a broker compacts a partition, against the
least work any cleaner must do over the same bytes.

One compacted log of ``--mb`` MiB is written first (1 MiB segments, batches of 100 records of
``--value-bytes`` values, keys drawn from ``--keys`` distinct ones with a seeded random source,
so nearly every record is obsolete), its HW at its end. Then, per round, in the same run:

* read_crc: every segment file read once and CRC-32C'd in 1 MiB chunks: the floor, since a pass
  must read and validate everything it cleans.
* pass: the broker's pass on the cleanable range (every segment but the active one) exactly as
  `LogCleaner` runs it in its worker thread: `plan_cleaning` then `run_cleaning` (the offset map
  of every key's latest offset, then the rewrite into ``.cleaned`` files); the swap, which only
  renames files inside the partition actor, is left out. The ``.cleaned`` files are removed
  after each round, so every round cleans the same input.

Reported: MiB/s of input for each (median and min-max over ``--rounds`` after one discarded
warm-up round), the pass's ratio to read_crc, and what the pass kept (bytes out / bytes in).
Run with ``python -m bench.cleaner [--mb 128] [--rounds 5] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from crc32c import crc32c

from runtime.clock import ManualClock
from runtime.log.cleaner.manager import cleanable_range
from runtime.log.cleaner.task import plan_cleaning, remove_cleaned_files, run_cleaning
from runtime.log.config import LogConfig
from runtime.log.log import Log
from wire.batch_builder import build_batch
from wire.topic import TopicPartition

MIB = 1 << 20
TP = TopicPartition("bench-compacted", 0)
RECORDS_PER_BATCH = 100
MAX_MAP_ENTRIES = 4_000_000  # far above --keys: one pass takes the whole range
SEED = 2411


def write_log(directory: Path, mb: int, keys: int, value_bytes: int) -> tuple[Log, ManualClock]:
    clock = ManualClock()
    config = LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": MIB, "min.cleanable.dirty.ratio": 0.01}
    )
    log = Log.open(directory / TP.dir_name, config, clock)
    rng = random.Random(SEED)
    value = bytes(value_bytes)
    while log.size_bytes < mb * MIB:
        records = [(b"key-%08d" % rng.randrange(keys), value) for _ in range(RECORDS_PER_BATCH)]
        log.append_as_leader(build_batch(records, base_timestamp=clock.wall_ms()), leader_epoch=0)
        clock.advance(1)
    log.update_high_watermark(log.log_end_offset)
    return log, clock


def read_crc(paths: list[Path]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            position = 0
            while chunk := os.pread(fd, MIB, position):
                crc32c(chunk)
                position += len(chunk)
        finally:
            os.close(fd)


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cleaner", description=__doc__)
    parser.add_argument("--mb", type=int, default=128, help="log size in MiB (128)")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys (10000)")
    parser.add_argument("--value-bytes", type=int, default=100, help="value size (100)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (5)")
    parser.add_argument("--dir", type=Path, default=None, help="where the log goes (a tmp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.mb < 2 or args.keys < 1 or args.value_bytes < 0 or args.rounds < 1:
        parser.error("--mb >= 2, --keys >= 1, --value-bytes >= 0 and --rounds >= 1")
    root = Path(tempfile.mkdtemp(prefix="ketch-bench-cleaner-", dir=args.dir))
    try:
        log, clock = write_log(root, args.mb, args.keys, args.value_bytes)
        chosen = cleanable_range(TP, log, None, clock.wall_ms()).segments
        paths = [segment.log_path for segment in chosen]
        input_bytes = sum(segment.size for segment in chosen)
        kept: list[float] = []

        def one_pass() -> None:
            task = plan_cleaning(
                TP,
                log,
                chosen,
                first_dirty_offset=log.log_start_offset,
                now_ms=clock.wall_ms(),
                max_map_entries=MAX_MAP_ENTRIES,
            )
            cleaned = run_cleaning(task)
            assert cleaned is not None
            assert not cleaned.cut_short
            kept.append(cleaned.stats.bytes_out / cleaned.stats.bytes_in)
            remove_cleaned_files(log.directory)

        floor: list[float] = []
        passes: list[float] = []
        for round_ in range(args.rounds + 1):  # round 0 warms the page cache and is dropped
            f, p = timed(lambda: read_crc(paths)), timed(one_pass)
            if round_:
                floor.append(input_bytes / MIB / f)
                passes.append(input_bytes / MIB / p)
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures = {
        "input_mib": round(input_bytes / MIB, 1),
        "keys": args.keys,
        "read_crc_mib_s": _summary(floor),
        "pass_mib_s": _summary(passes),
        "pass_to_read_crc": round(statistics.median(passes) / statistics.median(floor), 3),
        "kept_fraction": round(statistics.median(kept), 4),
    }
    print(f"live cleaner pass over {figures['input_mib']} MiB, {args.keys} keys:")
    for name in ("read_crc_mib_s", "pass_mib_s"):
        summary = figures[name]
        assert isinstance(summary, dict)
        print(
            f"  {name:<16} median {summary['median']:>8.1f} MiB/s"
            f"  (min {summary['min']:.1f}, max {summary['max']:.1f})"
        )
    print(f"  pass / read_crc   {figures['pass_to_read_crc']}x")
    print(f"  kept              {figures['kept_fraction']:.2%} of the bytes")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


if __name__ == "__main__":
    raise SystemExit(main())
