"""Offline pipeline throughput: `ketch verify` at local[1] and local[2], a plain Python pass, and
`ketch compact`, on the same generated logs.

Data: a cluster data dir in a temporary directory (``--dir`` to choose where) with three broker
log dirs ``broker-0..2`` holding the same ``--partitions`` partitions of one topic, ``--gb`` in
all (default 1.0 = 2^30 bytes of segment files). Broker 0's logs are written by the storage
engine (`LogManager` + `Log.append_as_leader`; 32 MB segments, smaller for a small run, so each
partition has several and compaction has non-active segments to clean) from 64 prebuilt
uncompressed 16 KB batches of 128 records each (keys drawn per template from 20 000 per
partition, so keys repeat across batches), cycled (the broker patches offsets and epochs); HW
checkpoint at the log end, clean shutdown.
Brokers 1 and 2 are file copies, as in-sync replicas are byte-identical.

Measures, in one run (page cache warm, since the data was just written):

* ``plain_python``: one process calling `offline.batch_scan.scan_segment` on every segment file of
  every replica: the same per-batch checks (header, CRC-32C) the verify job's scan makes.
* ``local1`` / ``local2``: `offline.verify_job.run_verify` over the cluster data dir in a fresh
  SparkSession at ``local[1]`` / ``local[2]`` (stopped in between). Session start-up (the JVM,
  once per process) is not timed; each figure is the faster of two runs in its session, the
  first one also starting the Python workers.
* ``compact``: `offline.compact.run_compact` with ``--install`` semantics on broker 2's log dir
  (cleanup.policy=compact given as an override), at local[2]; MB/s over the bytes of the
  segments it cleaned, timed from planning to the installed result.
* ``master`` (with ``--master URL`` or ``--standalone N``): verify as for local[2], on a Spark
  cluster: the one at URL, or a standalone cluster of N workers (1 core, 1g each) started on
  127.0.0.1 for the run (`offline.standalone`, as ``ketch spark up`` does). On one machine this
  measures what running as a cluster costs (executor JVMs, task shipping, Python workers per
  executor) against local[2] on the same data and cores, not a cluster's scaling.

``python -m bench.verify [--gb 1.0] [--json FILE] [--master URL | --standalone N]`` prints a
table and writes ``{"bytes", "local1_mb_s", "local2_mb_s", "plain_python_mb_s",
"compact_mb_s"}``, plus ``"master"`` and ``"master_mb_s"`` with a cluster.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from runtime.clock import SystemClock
from runtime.log.config import LogManagerConfig
from runtime.log.manager import LogManager
from wire.batch_builder import build_batch
from wire.topic import TopicPartition

TOPIC: Final = "bench"
REPLICAS: Final = 3
TEMPLATES: Final = 64
RECORDS_PER_BATCH: Final = 128
VALUE_BYTES: Final = 100  # + ~12-byte keys and record overhead: ~16 KB per batch
KEYS_PER_PARTITION: Final = 20_000
SEGMENT_BYTES: Final = 32 << 20
GIB: Final = 1 << 30
MB: Final = 1_000_000


def _templates(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(TEMPLATES):
        records = [
            (b"key-%08d" % rng.randrange(KEYS_PER_PARTITION), rng.randbytes(VALUE_BYTES))
            for _ in range(RECORDS_PER_BATCH)
        ]
        out.append(build_batch(records, base_timestamp=1_700_000_000_000))
    return out


def segment_bytes_for(partition_bytes: int) -> int:
    """32 MB, or less for a small run, so every partition has about four segments or more."""
    return max(1 << 20, min(SEGMENT_BYTES, partition_bytes // 4))


def generate(root: Path, total_bytes: int, partitions: int, seed: int = 0) -> int:
    """Write the cluster data dir (see the module docstring); returns the segment bytes."""
    first = root / "broker-0"
    per_partition = total_bytes // REPLICAS // partitions
    config = LogManagerConfig.from_properties(
        {"log.dirs": str(first), "segment.bytes": segment_bytes_for(per_partition)}
    )
    manager = LogManager(config, SystemClock())
    manager.open()
    templates = _templates(seed)
    hws = {}
    for p in range(partitions):
        tp = TopicPartition(TOPIC, p)
        log = manager.get_or_create_log(tp)
        written, i = 0, 0
        while written < per_partition:
            batch = templates[(i + p) % TEMPLATES]
            log.append_as_leader(batch, 0)
            written += len(batch)
            i += 1
        hws[tp] = log.log_end_offset
    manager.write_high_watermarks(hws)
    manager.shutdown()
    for replica in range(1, REPLICAS):
        shutil.copytree(first, root / f"broker-{replica}")
    return sum(path.stat().st_size for path in root.glob("broker-*/*/*.log"))


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def plain_python_pass(root: Path) -> float:
    """Seconds for one process to scan every segment file of every replica."""
    from offline.batch_scan import scan_segment

    def scan() -> int:
        bad = 0
        for path in sorted(root.glob("broker-*/*/*.log")):
            for batch in scan_segment(path):
                if batch.reason is not None:
                    bad += 1
        return bad

    seconds, bad = _timed(scan)
    assert bad == 0, f"{bad} invalid batches in generated data"
    return float(seconds)


def verify_seconds(root: Path, master: str, conf: dict[str, str] | None = None) -> float:
    from offline.spark_session import build_session
    from offline.verify_job import run_verify

    spark = build_session(master, f"bench verify {master}", conf=conf or {})
    try:
        best = float("inf")
        for _ in range(2):
            seconds, report = _timed(lambda: run_verify(spark, [str(root)]))
            assert report.ok, f"verify found problems in generated data: {report.findings[:3]}"
            best = min(best, seconds)
        return best
    finally:
        spark.stop()


def compact_mb_s(root: Path) -> tuple[float, int]:
    from offline.compact import run_compact
    from offline.spark_session import build_session

    spark = build_session("local[2]", "bench compact")
    try:
        result = run_compact(
            spark,
            root / f"broker-{REPLICAS - 1}",
            TOPIC,
            now_ms=time.time_ns() // 1_000_000,
            install=True,
            config_overrides={"cleanup.policy": "compact", "segment.bytes": SEGMENT_BYTES},
        )
    finally:
        spark.stop()
    cleaned = result.source_bytes
    return cleaned / MB / result.elapsed_s, cleaned


def _on_cluster(root: Path, master: str | None, workers: int | None) -> tuple[str, float] | None:
    """(master URL, verify seconds) on the given master or a standalone cluster started here."""
    if master is not None:
        return master, verify_seconds(root, master)
    if workers is None:
        return None
    from offline.standalone import start_standalone

    with start_standalone(workers, cores=1, memory="1g") as cluster:
        # Executors as large as a worker offers; the driver's settings are the local runs'.
        seconds = verify_seconds(root, cluster.master_url, {"spark.executor.memory": "1g"})
        return f"standalone ({workers} workers)", seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--gb", type=float, default=1.0, help="GiB of segment files in all")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--dir", type=Path, default=None, help="where to generate (a temp dir)")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the figures here")
    cluster = parser.add_mutually_exclusive_group()
    cluster.add_argument("--master", default=None, help="also verify on this Spark master URL")
    cluster.add_argument(
        "--standalone",
        type=int,
        default=None,
        metavar="N",
        help="also verify on a standalone cluster of N workers started for the run",
    )
    args = parser.parse_args(argv)
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="ketch-bench-verify-", dir=args.dir))
    try:
        seconds, total = _timed(lambda: generate(root, int(args.gb * GIB), args.partitions))
        console.print(f"generated {total / MB:.0f} MB in {seconds:.1f} s under {root}")
        plain = plain_python_pass(root)
        local1 = verify_seconds(root, "local[1]")
        local2 = verify_seconds(root, "local[2]")
        # Before compact, which rewrites broker 2's logs (verify would then find them changed).
        on_master = _on_cluster(root, args.master, args.standalone)
        compact, cleaned = compact_mb_s(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures = {
        "bytes": total,
        "local1_mb_s": round(total / MB / local1, 1),
        "local2_mb_s": round(total / MB / local2, 1),
        "plain_python_mb_s": round(total / MB / plain, 1),
        "compact_mb_s": round(compact, 1),
    }
    table = Table(title=f"offline pipeline, {total / MB:.0f} MB, {REPLICAS} replicas")
    table.add_column("measure")
    table.add_column("seconds", justify="right")
    table.add_column("MB/s", justify="right")
    table.add_row("plain Python scan_segment", f"{plain:.2f}", str(figures["plain_python_mb_s"]))
    table.add_row("verify local[1]", f"{local1:.2f}", str(figures["local1_mb_s"]))
    table.add_row("verify local[2]", f"{local2:.2f}", str(figures["local2_mb_s"]))
    table.add_row(
        f"compact local[2] ({cleaned / MB:.0f} MB cleaned)",
        f"{cleaned / MB / compact:.2f}" if compact else "-",
        str(figures["compact_mb_s"]),
    )
    if on_master is not None:
        master, seconds = on_master
        figures["master"] = master
        figures["master_mb_s"] = round(total / MB / seconds, 1)
        table.add_row(f"verify {master}", f"{seconds:.2f}", str(figures["master_mb_s"]))
    console.print(table)
    console.print(f"local[2] / local[1] = {local1 / local2:.2f}x")
    if on_master is not None:
        console.print(f"{on_master[0]} / local[2] = {local2 / on_master[1]:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
