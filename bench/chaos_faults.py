"""The chaos run's faults (bench/chaos.py): drawn one after another from a seeded PRNG, each
injected through the testing API (testkit/testing.py), held, undone, and followed by a wait
until the cluster has recovered.

    kill             kill -9 of a broker, restarted after the hold
    pause            SIGSTOP of a broker for 1.5-3 session timeouts (so the controller fences it
                     and it leaves the ISRs), then SIGCONT
    shutdown         controlled shutdown (SIGTERM, exit 0) of a broker, restarted after the hold
    controller kill  kill -9 of the controller, restarted after the hold
    cut one way      the link a -> b cut (testkit/proxy.py says what each side sees), healed
                     after the hold; a and b among the controller, the brokers and the clients
    partition        a and b cut both ways, or one broker isolated from everything, then healed

A broker target is either a broker id or "the leader of partition p" (resolved when the fault
starts), each drawn from the seed; so is every hold and the gap before the next fault. The same
seed draws the same sequence of faults; how many fit in the run depends on how long recoveries
take. Faults do not overlap: each is undone and the cluster has recovered (every broker
registered and running, every partition led with a full ISR) before the next, so what is
judged is safety under each fault and recovery after it, and a run that does not recover within
RECOVERY_S is a finding in itself (`RecoveryError`).

Ownership: runs on the chaos run's event loop; the cluster's processes are signalled by PID
through the testing API.
"""

from __future__ import annotations

import asyncio
import enum
import random
import time
from dataclasses import dataclass
from typing import Final

from testkit.testing import CLIENT, CONTROLLER, KetchCluster, Node

RECOVERY_S: Final = 60.0


class Kind(enum.Enum):
    KILL = "kill -9 broker"
    PAUSE = "SIGSTOP/SIGCONT broker"
    SHUTDOWN = "controlled shutdown"
    CONTROLLER_KILL = "kill -9 controller"
    CUT_ONE_WAY = "link cut, one way"
    PARTITION = "partition, both ways"


# How often each kind is drawn, relative to the others.
WEIGHTS: Final = {
    Kind.KILL: 3,
    Kind.PAUSE: 2,
    Kind.SHUTDOWN: 2,
    Kind.CONTROLLER_KILL: 1,
    Kind.CUT_ONE_WAY: 3,
    Kind.PARTITION: 3,
}


class RecoveryError(Exception):
    """The cluster did not recover from a fault within RECOVERY_S."""


@dataclass(frozen=True, slots=True)
class Target:
    """A broker id, or the current leader of `partition` (when `broker` is None)."""

    broker: int | None = None
    partition: int | None = None

    def describe(self) -> str:
        if self.broker is not None:
            return f"broker {self.broker}"
        return f"the leader of partition {self.partition}"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: Kind
    hold_s: float
    gap_s: float  # the pause before the next fault
    target: Target | None = None  # process faults, and an isolated broker
    link: tuple[Node, Node] | None = None  # cuts and two-node partitions

    def describe(self) -> str:
        if self.link is not None:
            a, b = self.link
            where = f"{a} -> {b}" if self.kind is Kind.CUT_ONE_WAY else f"{a} <-> {b}"
        elif self.target is None:
            where = "the controller"
        elif self.kind is Kind.PARTITION:
            where = f"isolate {self.target.describe()}"
        else:
            where = self.target.describe()
        return f"{self.kind.value}: {where}, {self.hold_s:.1f} s"


def draw(rng: random.Random, brokers: int, partitions: int, session_s: float) -> Fault:
    """The next fault of a seeded schedule."""
    kinds = list(WEIGHTS)
    kind = rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]
    gap_s = rng.uniform(0.5, 2.0)
    if kind is Kind.CONTROLLER_KILL:
        return Fault(kind, rng.uniform(0.5, 3.0), gap_s)
    if kind in (Kind.KILL, Kind.SHUTDOWN):
        return Fault(kind, rng.uniform(0.5, 3.0), gap_s, _target(rng, brokers, partitions))
    if kind is Kind.PAUSE:
        hold_s = rng.uniform(1.5, 3.0) * session_s
        return Fault(kind, hold_s, gap_s, _target(rng, brokers, partitions))
    hold_s = rng.uniform(1.0, 4.0)
    nodes: list[Node] = [CONTROLLER, *range(brokers), CLIENT]
    if kind is Kind.PARTITION and rng.random() < 1 / 3:
        return Fault(kind, hold_s, gap_s, _target(rng, brokers, partitions))
    a, b = rng.sample(nodes, 2)
    return Fault(kind, hold_s, gap_s, link=(a, b))


def _target(rng: random.Random, brokers: int, partitions: int) -> Target:
    if rng.random() < 0.5:
        return Target(partition=rng.randrange(partitions))
    return Target(broker=rng.randrange(brokers))


@dataclass(frozen=True, slots=True)
class Injected:
    """What one fault did: its description (targets resolved), its window and the recovery."""

    index: int
    fault: Fault
    what: str
    began_s: float  # time.monotonic()
    undone_s: float
    recovered_s: float


async def inject(cluster: KetchCluster, fault: Fault, topic: str, index: int) -> Injected:
    """Apply `fault`, hold it, undo it, and wait until the cluster has recovered."""
    began = time.monotonic()
    try:
        what = await _apply(cluster, fault, topic)
    except (RuntimeError, TimeoutError) as exc:
        # A restart that timed out, a node that exited, a controlled shutdown that did not
        # exit 0: the exception carries the nodes' logs.
        raise RecoveryError(f"fault #{index} ({fault.describe()}): {exc}") from None
    undone = time.monotonic()
    try:
        await cluster.wait_running(cluster.brokers, timeout_s=RECOVERY_S)
        await cluster.wait_for_isr(topic, timeout_s=RECOVERY_S)
    except (RuntimeError, TimeoutError) as exc:
        raise RecoveryError(f"fault #{index} ({what}): no recovery: {exc}") from None
    return Injected(index, fault, what, began, undone, time.monotonic())


async def _apply(cluster: KetchCluster, fault: Fault, topic: str) -> str:
    """Apply, hold and undo; the description with the broker named."""
    broker = None if fault.target is None else await _resolve(cluster, fault.target, topic)
    what = fault.describe() + ("" if broker is None else f" (broker {broker})")
    match fault.kind:
        case Kind.KILL:
            assert broker is not None
            await cluster.kill(broker)
            await asyncio.sleep(fault.hold_s)
            await cluster.restart(broker, timeout_s=RECOVERY_S)
        case Kind.PAUSE:
            assert broker is not None
            await cluster.pause(broker, fault.hold_s)
        case Kind.SHUTDOWN:
            assert broker is not None
            await cluster.controlled_shutdown(broker)
            await asyncio.sleep(fault.hold_s)
            await cluster.restart(broker, timeout_s=RECOVERY_S)
        case Kind.CONTROLLER_KILL:
            await cluster.kill(CONTROLLER)
            await asyncio.sleep(fault.hold_s)
            await cluster.restart(CONTROLLER, timeout_s=RECOVERY_S)
        case Kind.CUT_ONE_WAY | Kind.PARTITION:
            if fault.link is not None:
                a, b = fault.link
                cluster.partition(a, b, one_way=fault.kind is Kind.CUT_ONE_WAY)
            else:
                assert broker is not None
                cluster.isolate(broker)
            await asyncio.sleep(fault.hold_s)
            cluster.heal()
    return what


async def _resolve(cluster: KetchCluster, target: Target, topic: str) -> int:
    if target.broker is not None:
        return target.broker
    assert target.partition is not None
    return await cluster.leader_of(topic, target.partition, timeout_s=RECOVERY_S)
