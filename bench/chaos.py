"""The chaos run: real processes under kill -9, pauses, controlled shutdowns, controller kills
and link cuts while acks=all producers write, then a check that nothing acknowledged was lost.

    python -m bench.chaos --seconds 600 --seed S [--root DIR] [--json F] [--no-verify]

The cluster is the testing API's (testkit/testing.py): a controller and 3 brokers as processes
on 127.0.0.1, every listener behind testkit/proxy.py's fault-injecting proxy, the short timeouts
of FAILOVER_PROPERTIES (a session of 1 s), and a topic of 3 partitions, replication factor 3 and
min.insync.replicas=2. The workload (bench/chaos_workload.py): ketch's own idempotent producer
through the native listeners and librdkafka's (confluent-kafka, enable.idempotence=true,
acks=all) through the Kafka listeners, both paced and round-robin over the partitions, plus a
consumer reading from offset 0. The faults (bench/chaos_faults.py) are drawn one by one from
the seed, printed first so a run can be replayed: each is applied, held, undone, and the
cluster recovers before the next.

At the end every fault is healed, the producers flush, every partition is read back from offset
0 to its high watermark, and the run is judged: every acknowledged offset must hold its value
(lost), no value may be in the log twice (duplicated: idempotence), every record the consumer
saw must still be where it saw it (diverged). Then the cluster stops cleanly and `ketch verify`
(offline/verify.py, Spark) checks the data directories: segments, indexes, and replicas
byte-identical below the high watermark. It prints a table: faults by kind, writes acknowledged,
lost, duplicated, diverged, the longest unavailability (the longest time in which no acks=all
write of either producer was acknowledged, and the fault it fell in), and the verify result; the
exit code is 1 on any loss, duplicate, divergence, failed recovery or verify finding, else 0.

Ownership: one event loop runs the harness, the faults, the native producer and the consumer;
the proxies have their own thread (testkit/proxy.py) and librdkafka's producer a worker thread.
The processes are signalled only by their recorded PIDs and killed on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from bench.chaos_faults import Injected, RecoveryError, draw, inject
from bench.chaos_workload import (
    AckLog,
    LibrdkafkaProducer,
    NativeProducer,
    Reader,
    judge,
    longest_gap,
    read_back,
    stop_all,
)
from testkit.processes import REPO
from testkit.testing import FAILOVER_PROPERTIES, KetchCluster, ketch_cluster

TOPIC: Final = "chaos"
PARTITIONS: Final = 3
BROKERS: Final = 3
TOPIC_CONFIGS: Final = {"min.insync.replicas": "2"}
WARM_UP_S: Final = 30.0
VERIFY_TIMEOUT_S: Final = 600.0
# After the last fault: how many acknowledgements each producer must add, to show it recovered.
ACKS_AFTER_HEAL: Final = 20


@dataclass
class ChaosResult:
    """Everything the run measured; `ok` is the verdict."""

    seed: int
    seconds: float
    faults: dict[str, int] = field(default_factory=dict)  # by kind
    injected: list[str] = field(default_factory=list)  # each fault, as applied
    sent: dict[str, int] = field(default_factory=dict)
    acknowledged: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # "producer: error" -> count
    producers_replaced: int = 0
    consumed: int = 0
    lost: int = 0
    duplicated: int = 0
    diverged: int = 0
    examples: list[str] = field(default_factory=list)
    longest_unavailable_s: float = 0.0
    longest_unavailable_at_s: float = 0.0  # since the first fault
    longest_unavailable_during: str = ""
    longest_recovery_s: float = 0.0
    recovery_error: str = ""
    exit_codes: dict[str, int] = field(default_factory=dict)  # the clean stop's
    verify: str = "skipped"  # "clean", "findings", "error: ...", "skipped"

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.duplicated == 0
            and self.diverged == 0
            and not self.recovery_error
            and self.verify in ("clean", "skipped")
        )


async def run_chaos(
    seconds: float, seed: int, root: Path, *, verify: bool, console: Console
) -> ChaosResult:
    """The whole run (module docstring), in `root`."""
    result = ChaosResult(seed=seed, seconds=seconds)
    log = AckLog()
    console.print(f"chaos run: seed {seed}, {seconds:g} s, cluster in {root}")
    async with ketch_cluster(BROKERS, kafka=True, properties=FAILOVER_PROPERTIES, root=root) as c:
        await c.create_topic(
            TOPIC, partitions=PARTITIONS, replication_factor=BROKERS, configs=TOPIC_CONFIGS
        )
        native = NativeProducer(c, TOPIC, PARTITIONS, log)
        librdkafka = LibrdkafkaProducer(c.bootstrap, TOPIC, PARTITIONS, log)
        reader = Reader(c, TOPIC, PARTITIONS)
        loop = asyncio.get_running_loop()
        tasks = (
            loop.create_task(native.run()),
            asyncio.ensure_future(asyncio.to_thread(librdkafka.run)),
            loop.create_task(reader.run()),
        )
        try:
            await _acks_from_both(log, 1, WARM_UP_S, "the producers start")
            start_s, end_s, windows = await _faults(c, seconds, seed, result, console)
            c.heal()
            await _acks_from_both(log, ACKS_AFTER_HEAL, WARM_UP_S, "writes after the heal")
        except RecoveryError as exc:
            result.recovery_error = str(exc)
            console.print(f"[red]{exc}")
            start_s = end_s = time.monotonic()
            windows = []
        finally:
            await stop_all(native, tasks[0], librdkafka, tasks[1], reader, tasks[2])
        if not result.recovery_error:
            logs = await read_back(c, TOPIC, PARTITIONS)
            acks = log.snapshot()
            verdict = judge(acks, logs, reader.seen)
            result.lost, result.duplicated, result.diverged = (
                verdict.lost,
                verdict.duplicated,
                verdict.diverged,
            )
            result.examples = list(verdict.examples)
            gap, at = longest_gap(acks, start_s, end_s)
            result.longest_unavailable_s, result.longest_unavailable_at_s = gap, at
            result.longest_unavailable_during = _during(windows, start_s + at, gap)
        result.acknowledged = {p: log.count(p) for p in ("native", "librdkafka")}
        result.sent = dict(log.sent)
        result.failures = dict(log.failures)
        result.producers_replaced = native.replaced + librdkafka.replaced
        result.consumed = len(reader.seen)
        result.exit_codes = await c.stop()
    if verify and not result.recovery_error:
        result.verify = ketch_verify(root, console)
    return result


async def _faults(
    cluster: KetchCluster, seconds: float, seed: int, result: ChaosResult, console: Console
) -> tuple[float, float, list[Injected]]:
    """Inject faults drawn from `seed` until `seconds` have passed: when they began and ended
    (monotonic), and each fault's window."""
    rng = random.Random(seed)
    session_s = float(str(FAILOVER_PROPERTIES["broker.session.timeout.ms"])) / 1_000
    start = time.monotonic()
    deadline = start + seconds
    kinds: collections.Counter[str] = collections.Counter()
    windows: list[Injected] = []
    index = 0
    while time.monotonic() < deadline:
        fault = draw(rng, BROKERS, PARTITIONS, session_s)
        index += 1
        injected = await inject(cluster, fault, TOPIC, index)
        windows.append(injected)
        kinds[fault.kind.value] += 1
        elapsed = injected.began_s - start
        recovery = injected.recovered_s - injected.undone_s
        console.print(f"{elapsed:7.1f} s  #{index} {injected.what}; recovered in {recovery:.1f} s")
        result.injected.append(injected.what)
        result.longest_recovery_s = max(result.longest_recovery_s, recovery)
        await asyncio.sleep(max(0.0, min(fault.gap_s, deadline - time.monotonic())))
    result.faults = dict(kinds)
    return start, time.monotonic(), windows


def _during(windows: Sequence[Injected], at_s: float, gap_s: float) -> str:
    """The faults whose window (applied .. recovered) overlaps the gap [at_s, at_s + gap_s]."""
    hits = [
        f"#{w.index} {w.what}"
        for w in windows
        if w.began_s <= at_s + gap_s and at_s <= w.recovered_s
    ]
    return "; ".join(hits) or "no fault"


async def _acks_from_both(log: AckLog, more: int, timeout_s: float, what: str) -> None:
    """Until each producer has `more` acknowledgements beyond what it has now."""
    targets = {p: log.count(p) + more for p in ("native", "librdkafka")}
    deadline = time.monotonic() + timeout_s
    while any(log.count(p) < n for p, n in targets.items()):
        if time.monotonic() > deadline:
            counts = {p: log.count(p) for p in targets}
            raise RecoveryError(f"{what}: acknowledgements {counts}, wanted {targets}")
        await asyncio.sleep(0.05)


def ketch_verify(root: Path, console: Console) -> str:
    """`ketch verify` on the stopped cluster's data directory, in a child process."""
    report = root / "verify.json"
    command = [sys.executable, "-m", "cli.main", "verify", "--json", str(report), str(root)]
    console.print("ketch verify " + str(root))
    try:
        done = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return f"error: no answer in {VERIFY_TIMEOUT_S:g} s"
    console.print(done.stdout.strip())
    if done.returncode == 0:
        return "clean"
    if done.returncode == 1:
        return "findings"
    return f"error: exit {done.returncode}: {done.stderr.strip()[-500:]}"


def render(result: ChaosResult) -> Table:
    table = Table(title=f"Chaos run: seed {result.seed}, {result.seconds:g} s of faults")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for kind, count in sorted(result.faults.items()):
        table.add_row(f"faults: {kind}", str(count))
    table.add_row("faults: total", str(sum(result.faults.values())))
    for producer in ("native", "librdkafka"):
        table.add_row(
            f"writes acknowledged: {producer}",
            f"{result.acknowledged.get(producer, 0)} of {result.sent.get(producer, 0)} sent",
        )
    table.add_row("lost (acknowledged, not there)", _mark(result.lost))
    table.add_row("duplicated (values twice in the log)", _mark(result.duplicated))
    table.add_row("diverged (consumed, then changed)", _mark(result.diverged))
    table.add_row("records consumed during the run", str(result.consumed))
    table.add_row(
        "longest unavailability (no acks=all ack)",
        f"{result.longest_unavailable_s * 1_000:.0f} ms at {result.longest_unavailable_at_s:.1f} s",
    )
    table.add_row("  during", result.longest_unavailable_during or "-")
    table.add_row("longest recovery after a fault", f"{result.longest_recovery_s:.1f} s")
    table.add_row("producers replaced after a fatal error", str(result.producers_replaced))
    for failure, count in sorted(result.failures.items()):
        table.add_row(f"failed sends: {failure}", str(count))
    table.add_row("clean stop exit codes", str(result.exit_codes))
    table.add_row("ketch verify", result.verify)
    if result.recovery_error:  # its first line: the whole text, logs included, was printed
        table.add_row("[red]recovery", result.recovery_error.splitlines()[0][:300])
    return table


def _mark(count: int) -> str:
    return str(count) if count == 0 else f"[red]{count}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--seconds", type=float, default=600.0, help="how long faults go on")
    parser.add_argument("--seed", type=int, help="the fault schedule's seed (default: random)")
    parser.add_argument("--root", type=Path, help="the cluster's directory (kept; default: temp)")
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("--no-verify", action="store_true", help="skip `ketch verify`")
    return parser


def main(argv: Sequence[str] | None = None, *, console: Console | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.seconds <= 0:
        print("--seconds must be > 0", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    console = console or Console(width=max(Console().width, 120))
    with contextlib.ExitStack() as stack:
        root = args.root or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-")))
        result = asyncio.run(
            run_chaos(args.seconds, seed, root, verify=not args.no_verify, console=console)
        )
    console.print(render(result))
    for example in result.examples:
        console.print(f"[red]{example}")
    if args.json is not None:
        document: dict[str, Any] = asdict(result)
        document["ok"] = result.ok
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    console.print(f"seed {seed}: " + ("[green]OK" if result.ok else "[red]FAILED"))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
