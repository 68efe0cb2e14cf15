"""The simulation's faults: a seeded plan, and the injector that applies and heals it.

`plan_faults(rng, ...)` draws a schedule before the run starts: faults one after another, each
held for a drawn time and then healed, with a drawn quiet gap between them. One fault at a time
keeps a seed's failure readable (the trace shows which fault was live) while every seed still
meets several kinds. The kinds, and what each does in the one-process cluster:

* `delay`: a link between two nodes gets latency and jitter (reordering across connections:
  chunks of one connection stay in order, as on TCP).
* `drop`: a link loses chunks with some probability; a byte stream cannot lose a chunk and go
  on, so each loss resets its connection (runtime/net/memory.py).
* `lost_answer`: the next chunk a broker sends to a client, or the controller to a broker, is
  lost and its connection reset: the request was applied, the answer never arrives, the sender
  retries (the "duplicate delivery" a network makes of a request; TCP itself neither duplicates
  nor reorders within one connection).
* `lost_alter_partition_answer` (in `OPTIONAL_KINDS`, not `KINDS`: a run uses it only when its
  settings name it): the answer to the next AlterPartition request a broker sends the controller
  is lost with its connection (`MemoryNetwork.lose_answer`, which recognises the request by its
  API key). It stays armed until that broker next proposes an ISR change (some later fault moves
  an ISR) or the faults end. A plain `lost_answer` from the controller nearly always hits a
  heartbeat's answer, as AlterPartition requests are rare and brief. Not in `KINDS` because a
  kind added there redraws every seed's plan.
* `partition`: two nodes cannot reach each other; `one_way`: only what the first sends to the
  second is held; `isolate`: one node from every other node and client.
* `pause`: a broker or the controller is frozen (SIGSTOP) past `replica.lag.time.max.ms` and
  the session timeout, then thawed (SIGCONT): the simulated loop runs none of its callbacks,
  tasks or timers meanwhile (testkit/sim/loop.py). Its connections stay open: what others send
  it waits unread (a sender blocks once its buffer is full), what it had sent still arrives.
  When it resumes, every timer that expired fires at once, after the work that had queued up,
  and it acts on a world that went on without it (a leader fenced and replaced, its session
  expired).
* `crash`: kill a broker (links cut, tasks stopped, no flush) and restart it from its files
  after the hold. Its unflushed tail (past each log's recovery point: Kafka acknowledges before
  fsync) is torn at a random byte, but only when every other broker is running and in every
  ISR: a tail lost on fewer replicas than the ISR holds loses nothing acknowledged.
* `crash_two`: two brokers crash, the second `amount` ms after the first (a leader and, while
  the cluster is still electing or catching up, another), both restarted after the hold; only
  the first may lose its tail (the rule above).
* `controlled_shutdown`: a clean stop (leadership moved away first), restart after the hold.
* `controller_crash`: the controller's links cut and its process stopped without its clean
  steps, a new one over the same metadata log after the hold.
* `clock_jump`: the wall clock steps forward or back (monotonic time never jumps).
* `disk_error`: the disk fails under one of a broker's logs (its next append raises an I/O
  error; testkit/disk.py): the broker takes the log dir offline and reports it, the controller
  moves leadership away; after the hold the broker is killed and restarted (the disk replaced).

* `disk_error_on_create`: creating a log fails on a broker: a regular file already sits where
  the next partitions the workload will create would have their directories (a read-only
  directory would not do: root, which runs the tests, writes through any file mode), so the
  broker's mkdir fails with an I/O error, it takes the dir offline and reports it; after the
  hold the files go and the broker, if its dir went offline, is restarted.

Ownership: the injector runs in one task of the simulation and is the only writer of the
network's link settings and of node lifecycles while the faults run.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testkit.cluster import Cluster
from testkit.disk import fail_log_writes
from testkit.sim.loop import SimClock
from wire.envelope import decode_request
from wire.errors import ProtocolError
from wire.frames import LENGTH_PREFIX_BYTES
from wire.messages import AlterPartitionRequest
from wire.records import iter_batches

log = logging.getLogger(__name__)

OPTIONAL_KINDS = ("lost_alter_partition_answer",)

KINDS = (
    "delay",
    "drop",
    "lost_answer",
    "partition",
    "one_way",
    "isolate",
    "pause",
    "crash",
    "crash_two",
    "controlled_shutdown",
    "controller_crash",
    "clock_jump",
    "disk_error",
    "disk_error_on_create",
)


@dataclass(frozen=True, slots=True)
class Fault:
    at_ms: int  # simulated time from the start of the fault phase
    kind: str
    hold_ms: int
    a: str  # a node name (broker-N, controller) or a client's
    b: str = ""
    amount: int = 0  # delay ms, drop per-mille, clock jump ms

    def describe(self) -> str:
        target = f"{self.a}" + (f"->{self.b}" if self.b else "")
        extra = f" amount={self.amount}" if self.amount else ""
        return f"{self.kind} {target} hold={self.hold_ms}ms{extra}"


def plan_faults(
    rng: random.Random,
    *,
    duration_ms: int,
    brokers: list[str],
    clients: list[str],
    controller: str,
    pause_ms: int,
    kinds: tuple[str, ...] = KINDS,
) -> list[Fault]:
    """A schedule of faults over `duration_ms` (module docstring). `pause_ms` is the least hold
    of a pause (longer than the lag and session timeouts)."""
    faults: list[Fault] = []
    at = rng.randrange(100, 400)
    nodes = [*brokers, controller]
    while at < duration_ms:
        kind = rng.choice(kinds)
        hold = rng.randrange(200, 1_500)
        a, b = rng.sample(nodes, 2)
        amount = 0
        if kind == "delay":
            amount = rng.randrange(5, 200)
        elif kind == "drop":
            amount = rng.randrange(20, 300)
        elif kind == "lost_answer":
            # A broker's answer to a client, or the controller's to a broker (AlterPartition,
            # registration, heartbeats) or to a client (its admin requests).
            source = rng.choice([*brokers, controller])
            targets = brokers + clients if source == controller else clients
            a, b, hold = source, rng.choice([t for t in targets if t != source]), 0
        elif kind == "lost_alter_partition_answer":
            a, b, hold = controller, rng.choice(brokers), 0  # the controller's answer to b
        elif kind == "crash_two":
            a, b = rng.sample(brokers, 2)
            amount = rng.randrange(0, 600)
        elif kind in (
            "isolate",
            "pause",
            "crash",
            "controlled_shutdown",
            "disk_error",
            "disk_error_on_create",
        ):
            # The controller pauses too (a SIGSTOP stops any process); it does not crash or
            # lose a disk here: controller_crash is its crash.
            a, b = rng.choice(nodes if kind == "pause" else brokers), ""
            if kind == "pause":
                hold = pause_ms + rng.randrange(0, 1_000)
            elif kind == "disk_error_on_create":
                hold = rng.randrange(1_600, 2_400)  # past the topic churn's next creation
        elif kind == "controller_crash":
            a, b = controller, ""
        elif kind == "clock_jump":
            a, b, hold = "clock", "", 0
            amount = rng.choice((-1, 1)) * rng.randrange(1_000, 3_600_000)
        faults.append(Fault(at, kind, hold, a, b, amount))
        at += hold + rng.randrange(100, 800)
    return faults


def is_request(api_key: int) -> Callable[[bytes], bool]:
    """Whether a chunk starts with a whole request frame of `api_key` (ketch's clients send one
    frame per chunk, so a request is recognised from the chunk that carries it)."""

    def test(chunk: bytes) -> bool:
        if len(chunk) < LENGTH_PREFIX_BYTES:
            return False
        end = LENGTH_PREFIX_BYTES + int.from_bytes(chunk[:LENGTH_PREFIX_BYTES], "big", signed=True)
        if not LENGTH_PREFIX_BYTES <= end <= len(chunk):
            return False
        try:
            return decode_request(memoryview(chunk)[LENGTH_PREFIX_BYTES:end]).api_key == api_key
        except ProtocolError:
            return False

    return test


def broker_id_of(node: str) -> int:
    return int(node.rsplit("-", 1)[1])


class FaultInjector:
    """Applies faults to a running simulated cluster and heals them (module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        clock: SimClock,
        rng: random.Random,
        *,
        clients: list[str],
        note: Callable[[str], None],
        incarnations: Counter[int],
        upcoming: Callable[[], list[str]] = list,
    ) -> None:
        """`upcoming()`: the directory names of partitions the workload will create next."""
        assert cluster.network is not None
        self.cluster = cluster
        self.network = cluster.network
        self.clock = clock
        self.rng = rng
        self.clients = clients
        self.note = note
        self.incarnations = incarnations
        self.injected: Counter[str] = Counter()
        self._upcoming = upcoming
        self._blockers: list[Path] = []
        self.torn_tails = 0

    def _everyone_but(self, node: str) -> list[str]:
        brokers = [self.cluster.node_name(b) for b in self.cluster.broker_ids]
        return [n for n in [*brokers, "controller", *self.clients] if n != node]

    async def apply(self, fault: Fault) -> None:
        self.injected[fault.kind] += 1
        self.note(f"fault {fault.describe()}")
        network = self.network
        if fault.kind == "delay":
            network.set_link(fault.a, fault.b, delay_ms=fault.amount, jitter_ms=fault.amount)
        elif fault.kind == "drop":
            network.set_link(fault.a, fault.b, drop_probability=fault.amount / 1000)
        elif fault.kind == "lost_answer":
            network.lose_next(fault.a, fault.b)
        elif fault.kind == "lost_alter_partition_answer":
            network.lose_answer(fault.b, fault.a, is_request(AlterPartitionRequest.API_KEY))
        elif fault.kind == "partition":
            network.partition(fault.a, fault.b)
        elif fault.kind == "one_way":
            network.partition(fault.a, fault.b, one_way=True)
        elif fault.kind == "isolate":
            for other in self._everyone_but(fault.a):
                network.partition(fault.a, other)
        elif fault.kind == "pause":
            self.clock.loop.freeze(fault.a)
        elif fault.kind == "crash":
            await self._crash(broker_id_of(fault.a))
        elif fault.kind == "crash_two":
            await self._crash(broker_id_of(fault.a))
            await self.clock.sleep(fault.amount / 1000)
            await self._crash(broker_id_of(fault.b))
        elif fault.kind == "controlled_shutdown":
            broker_id = broker_id_of(fault.a)
            if self.cluster.running(broker_id):
                await self.cluster.nodes[broker_id].stop()
        elif fault.kind == "controller_crash":
            network.kill("controller")
            await self.cluster.controller.stop()
        elif fault.kind == "clock_jump":
            self.clock.jump_wall(fault.amount)
        elif fault.kind == "disk_error":
            self._fail_disk(broker_id_of(fault.a))
        elif fault.kind == "disk_error_on_create":
            directory = self.cluster.log_dir(broker_id_of(fault.a))
            for name in self._upcoming():
                blocker = directory / name
                if not blocker.exists():
                    blocker.write_bytes(b"not a directory\n")
                    self._blockers.append(blocker)

    async def heal(self, fault: Fault) -> None:
        network = self.network
        if fault.kind in ("delay", "drop"):
            network.set_link(fault.a, fault.b)
        elif fault.kind in ("partition", "one_way"):
            network.heal(fault.a, fault.b)
        elif fault.kind == "isolate":
            for other in self._everyone_but(fault.a):
                network.heal(fault.a, other)
        elif fault.kind == "pause":
            self.clock.loop.thaw(fault.a)
        elif fault.kind in ("crash", "controlled_shutdown"):
            await self.restart(broker_id_of(fault.a))
        elif fault.kind == "crash_two":
            await self.restart(broker_id_of(fault.a))
            await self.restart(broker_id_of(fault.b))
        elif fault.kind == "controller_crash":
            await self.cluster.restart_controller()
        elif fault.kind == "disk_error":
            broker_id = broker_id_of(fault.a)
            if self.cluster.running(broker_id):
                await self.cluster.kill(broker_id)
            await self.restart(broker_id)
        elif fault.kind == "disk_error_on_create":
            broker_id = broker_id_of(fault.a)
            for blocker in self._blockers:
                blocker.unlink(missing_ok=True)
            self._blockers.clear()
            running = self.cluster.running(broker_id)
            if running and self.cluster.nodes[broker_id].log_manager.offline_directory_ids():
                await self.cluster.kill(broker_id)  # a dir offline stays so until a restart
            await self.restart(broker_id)
        self.note(f"healed {fault.kind} {fault.a}")

    async def restart(self, broker_id: int) -> None:
        if self.cluster.running(broker_id):
            return
        self.incarnations[broker_id] += 1
        await self.cluster.restart(broker_id)

    async def _crash(self, broker_id: int) -> None:
        if not self.cluster.running(broker_id):
            return
        node = self.cluster.nodes[broker_id]
        tear = self._may_tear(broker_id)
        # Where each log's flushed data ends, read before the process dies.
        logs = node.log_manager.logs.values() if tear else ()
        flushed = {Path(log_.directory): log_.recovery_point for log_ in logs}
        await self.cluster.kill(broker_id)
        for directory, recovery_point in sorted(flushed.items()):
            if _tear_tail(directory, recovery_point, self.rng):
                self.torn_tails += 1
                self.note(f"tore the unflushed tail of {directory.name} on broker {broker_id}")

    def _fail_disk(self, broker_id: int) -> None:
        if not self.cluster.running(broker_id):
            return
        logs = sorted(self.cluster.nodes[broker_id].log_manager.logs.items())
        if logs:
            tp, victim = self.rng.choice(logs)
            fail_log_writes(victim)
            self.note(f"the disk under {tp} on broker {broker_id} fails")

    def _may_tear(self, broker_id: int) -> bool:
        """Only when every other broker runs and sits in every ISR (module docstring)."""
        cluster = self.cluster
        others = [b for b in cluster.broker_ids if b != broker_id]
        if not all(cluster.running(b) for b in others):
            return False
        model = cluster.controller.actor.model
        for record in model.all_partitions():
            if any(b in record.replicas and b not in record.isr for b in others):
                return False
        return True


def _tear_tail(directory: Path, recovery_point: int, rng: random.Random) -> bool:
    """Cut the last segment of `directory` at a random byte past the recovery point."""
    segments = sorted(directory.glob("*.log"))
    if not segments:
        return False
    last = segments[-1]
    data = last.read_bytes()
    start = len(data)
    for position, header in iter_batches(data):
        if header.last_offset >= recovery_point:
            start = position
            break
    if start >= len(data):
        return False
    cut = rng.randrange(start, len(data))
    with last.open("r+b") as file:
        file.truncate(cut)
    return True
