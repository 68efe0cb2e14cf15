"""One seeded run of a whole simulated cluster under faults, judged by the checkers.

`run_seed(seed, base_dir)` builds the controller and N brokers of testkit/cluster.py on the
in-memory network (runtime/net/memory.py) and the simulated loop and clock (loop.py), inside
`deterministic_entropy(seed)`; so one seed is one run, event for event (`trace_digest` proves
it: a hash of every chunk every node sent, with its time, and of every fault and outcome).
The run, all in simulated time:

1. the cluster starts and the topics are created (replication factor 3, min.insync.replicas 2);
2. the workload starts (workload.py): an idempotent acks=all producer, a plain acks=all one, an
   acks=1 and an acks=0 one, a consumer reading every partition from the start, a simple
   consumer's offset commits, two members of a consumer group (group_member.py: join, sync,
   heartbeats, generation-fenced commits; one restarts now and then), transactions, and
   topics created, written and deleted while the faults run;
3. the fault phase: the seeded plan (faults.py) is applied fault after fault, each healed after
   its hold; the observer (observer.py) samples leaders, high watermarks, ISRs and controller
   epochs at every quiescent point;
4. healing: every link healed, every stopped node restarted; **liveness**, each within
   `Settings.liveness_ms`: every partition has a leader that serves it, the leaders' pending
   AlterPartitions have resolved (none outstanding), and an acks=all write succeeds; then, the
   writers stopped, every replica catches up (full ISR, every log end at the high watermark) and
   the group's members settle in one generation and commit every partition's end;
5. the final state: a fresh consumer reads every partition up to its high watermark, and each
   replica's log is read from its files (records and raw batch bytes);
6. the checkers (checkers.py) judge the history; a liveness failure is a violation too.

A failure is reported with its seed, the violations and the run's readable trace (`notes`:
faults, heals, liveness steps, worker errors, with simulated times).

Over 500 lines on purpose: one run is one story (start, workload, faults, healing, liveness,
read-back, checks) that reads best in one place; what it drives lives in the sibling modules.

Ownership: a run owns its loop, its cluster and its directory (`base_dir/seed-<seed>`, removed
and recreated at the start).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import shutil
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from client.client import Client
from client.config import ConsumerConfig
from client.consumer import Consumer
from client.fetched_records import ConsumerRecord
from runtime.clock import NS_PER_MS
from runtime.net.memory import LinkConfig, MemoryNetwork
from runtime.net.transport import Address
from testkit.cluster import Cluster
from testkit.sim.checkers import Violation, check_all, duplicate_counts
from testkit.sim.faults import KINDS, FaultInjector, plan_faults
from testkit.sim.group_member import GroupMemberWorker, give_offsets
from testkit.sim.history import History, LoggedRecord, Read, ReplicaState
from testkit.sim.loop import SimClock, SimulatedLoop, deterministic_entropy
from testkit.sim.observer import Observer
from testkit.sim.workload import (
    CLIENT_CONFIG,
    ConsumerWorker,
    OffsetCommitter,
    ProducerWorker,
    TopicChurn,
    TransactionalWorker,
    new_client,
    read_group_offsets,
)
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import DeleteTopicsRequest, DeleteTopicsResponse
from wire.record_reader import iter_records
from wire.records import iter_batches
from wire.topic import TopicPartition
from wire.transaction_log import TRANSACTION_STATE_TOPIC

LAG_MS: Final = 1_000
INTERNAL_PARTITIONS: Final = 3  # of __consumer_offsets and __transaction_state
SESSION_MS: Final = 300  # testkit.cluster.FAST_LIVENESS's broker.session.timeout.ms
PROPERTIES: Final[dict[str, object]] = {
    "min.insync.replicas": 2,
    "replica.lag.time.max.ms": LAG_MS,
    # An idle follower's fetch waits this long (an append wakes it at once); 20 ms made a
    # tenth of a seed's work idle fetch rounds.
    "replica.fetch.wait.max.ms": 100,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 1_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
    # Few coordinator partitions: each is a shard to load on every leadership move.
    "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
    "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
    # An abandoned transaction (transaction.timeout.ms 3 s here, workload.py) is aborted
    # within a second of timing out, not Kafka's 10 s.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1_000,
    # The group members' session timeout (group_member.py) is 600 ms, and a new group's first
    # rebalance waits 100 ms for more members, not Kafka's 3 s.
    "group.min.session.timeout.ms": 100,
    "group.initial.rebalance.delay.ms": 100,
}
GROUP: Final = "sim-group"  # the simple consumer's commits (no membership)
MEMBERS_GROUP: Final = "sim-members"  # the group members' (group_member.py)
ACKS_ALL: Final = -1


@dataclass(frozen=True, slots=True)
class Settings:
    brokers: int = 3
    fault_ms: int = 4_000  # simulated time the faults run
    liveness_ms: int = 10_000  # the bound on each liveness step after healing
    # Each producer's pace: 80 ms keeps a seed near 1.6 s of CPU (300 seeds in about four
    # minutes on two cores) with at least ~50 acks=all writes acknowledged per seed.
    producer_interval_ms: int = 80
    topics: tuple[tuple[str, int], ...] = (("sim-a", 2),)
    transactional_topic: tuple[str, int] | None = ("sim-txn", 2)
    churn: bool = True
    group_members: int = 2
    kinds: tuple[str, ...] = KINDS


@dataclass(frozen=True, slots=True)
class Figures:
    """What a run did, in numbers (for summaries; small enough to send between processes)."""

    seed: int
    ok: bool
    simulated_ms: int
    acknowledged: int
    commits: int  # offset commits acknowledged
    faults: Counter[str]
    torn_tails: int
    wall_s: float


@dataclass(slots=True)
class Result:
    seed: int
    violations: list[Violation]
    history: History
    faults: Counter[str]
    trace_digest: str
    notes: list[str]
    simulated_ms: int
    steps: int
    wall_s: float
    torn_tails: int
    duplicates: dict[str, int]
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def acknowledged(self) -> int:
        return sum(1 for ack in self.history.acks if ack.acks == ACKS_ALL)

    def figures(self) -> Figures:
        return Figures(
            self.seed,
            self.ok,
            self.simulated_ms,
            self.acknowledged,
            sum(1 for commit in self.history.offset_commits if commit.acknowledged),
            self.faults,
            self.torn_tails,
            self.wall_s,
        )


class _Trace:
    """The run's fingerprint (every chunk sent and every note) and its readable notes."""

    def __init__(self, clock: SimClock) -> None:
        self._clock = clock
        self._hash = hashlib.sha256()
        self.notes: list[str] = []

    def chunk(self, src: str, dst: str, chunk: bytes | None) -> None:
        size, crc = (-1, 0) if chunk is None else (len(chunk), zlib.crc32(chunk))
        self._hash.update(
            b"%d %s>%s %d %x\n" % (self._now_ns(), src.encode(), dst.encode(), size, crc)
        )

    def note(self, text: str) -> None:
        line = f"{self._now_ns() / NS_PER_MS:10.3f} ms  {text}"
        self.notes.append(line)
        self._hash.update(line.encode() + b"\n")

    def _now_ns(self) -> int:
        return self._clock.monotonic_ns()

    def digest(self) -> str:
        return self._hash.hexdigest()


def run_seed(seed: int, base_dir: Path, settings: Settings = Settings()) -> Result:
    """One run (module docstring), on a loop of its own."""
    directory = base_dir / f"seed-{seed}"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    loop = SimulatedLoop()
    started = time.perf_counter()
    try:
        with deterministic_entropy(seed):
            result = loop.run_until_complete(_Run(seed, directory, settings, loop).run())
    finally:
        loop.close()
    result.wall_s = time.perf_counter() - started
    return result


class _Run:
    def __init__(self, seed: int, directory: Path, settings: Settings, loop: SimulatedLoop) -> None:
        self.seed = seed
        self.settings = settings
        self.loop = loop
        self.rng = random.Random(seed)
        self.clock = SimClock(loop)
        self.trace = _Trace(self.clock)
        self.network = MemoryNetwork(seed, self.clock, default_link=LinkConfig(1, 1))
        self.network.tracer = self.trace.chunk
        self.cluster = Cluster(
            directory,
            range(settings.brokers),
            clock=self.clock,
            transport_for=self.network.transport,
            address_for=lambda name: Address(name, 9092),
            properties=PROPERTIES,
            network=self.network,
            seed=seed,
        )
        self.history = History(seed=seed)
        self.incarnations: Counter[int] = Counter()
        self.partitions: list[TopicPartition] = []
        self.workers: list[
            ProducerWorker
            | ConsumerWorker
            | OffsetCommitter
            | GroupMemberWorker
            | TransactionalWorker
            | TopicChurn
        ] = []
        self.violations: list[Violation] = []

    @property
    def bootstrap(self) -> list[Address]:
        return [Address(self.cluster.node_name(b), 9092) for b in self.cluster.broker_ids]

    async def run(self) -> Result:
        cluster = self.cluster
        await cluster.start()
        observer = Observer(cluster, self.history, self.incarnations, lambda: self.partitions)
        remove_hook = self.loop.on_advance(observer.sample)
        injector = self._injector()
        broken = False
        try:
            topics = list(self.settings.topics)
            if self.settings.transactional_topic is not None:
                topics.append(self.settings.transactional_topic)
            for topic, count in topics:
                self.partitions += await cluster.create_topic(topic, count, 3)
                self.history.set_min_insync_replicas(topic, 2)
            await self._give_the_group_offsets()
            self._start_workload()
            await self._faults(injector)
            await self._heal(injector)
            live = await self._liveness()
            for worker in self.workers:  # the writers first: the rest then catch up with them
                if not isinstance(worker, (ConsumerWorker, OffsetCommitter, GroupMemberWorker)):
                    await worker.stop()
            if live:
                await self._within(
                    self._caught_up, self.settings.liveness_ms, "every replica caught up"
                )
            if self._members():
                await self._within(
                    self._group_caught_up, self.settings.liveness_ms, "the group read to the end"
                )
            for worker in self.workers:
                await worker.stop()
            await self._within(
                self._transactions_ended, self.settings.liveness_ms, "every transaction ended"
            )
            await self._read_back()
            await self._read_group_offsets()
            self._collect_final()
        except Exception as error:  # ketch or the harness broke: the seed fails, with where
            broken = True
            trace = traceback.format_exc(limit=-6)
            self.violations.append(Violation("run", f"the run broke: {error!r}\n{trace}", None))
            self.trace.note(f"the run broke: {error!r}")
        finally:
            for worker in self.workers:
                await worker.stop()
            remove_hook()
            await self._stop_cluster()
        if not broken:  # a history cut short would only produce false alarms
            self.violations += check_all(self.history)
        errors: Counter[str] = Counter()
        for worker in self.workers:
            for kind, count in worker.errors.items():
                errors[f"{worker.name}:{kind}"] += count
        self.trace.note(f"done: {len(self.violations)} violations")
        return Result(
            seed=self.seed,
            violations=self.violations,
            history=self.history,
            faults=injector.injected,
            trace_digest=self.trace.digest(),
            notes=self.trace.notes,
            simulated_ms=self.clock.monotonic_ms(),
            steps=self.loop.steps,
            wall_s=0.0,
            torn_tails=injector.torn_tails,
            duplicates=duplicate_counts(self.history),
            errors=errors,
        )

    # -- the workload -------------------------------------------------------------------------

    def _producer(
        self, name: str, topic: str, partitions: int, acks: int, idempotent: bool
    ) -> ProducerWorker:
        return ProducerWorker(
            name,
            transport=self.network.transport(name),
            bootstrap=self.bootstrap,
            clock=self.clock,
            history=self.history,
            topic=topic,
            partitions=partitions,
            acks=acks,
            idempotent=idempotent,
            interval_ms=self.settings.producer_interval_ms,
        )

    def _start_workload(self) -> None:
        topic, count = self.settings.topics[0]
        consumer = ConsumerWorker(
            "consumer",
            transport=self.network.transport("consumer"),
            bootstrap=self.bootstrap,
            clock=self.clock,
            history=self.history,
            partitions=[tp for tp in self.partitions if tp.topic != self._txn_topic()],
        )
        self.workers = [
            self._producer("p-idempotent", topic, count, ACKS_ALL, True),
            self._producer("p-all", topic, count, ACKS_ALL, False),
            self._producer("p-one", topic, count, 1, False),
            self._producer("p-zero", topic, count, 0, False),
            consumer,
            OffsetCommitter(
                "committer",
                transport=self.network.transport("committer"),
                bootstrap=self.bootstrap,
                clock=self.clock,
                history=self.history,
                group=GROUP,
                source=consumer,
                interval_ms=300,
            ),
        ]
        self.workers += [
            GroupMemberWorker(
                name,
                transport=self.network.transport(name),
                bootstrap=self.bootstrap,
                clock=self.clock,
                history=self.history,
                group=MEMBERS_GROUP,
                topic=topic,
                partitions=count,
                # One member restarts now and then, as an application instance does, so
                # every seed rebalances; the others stay.
                restart_every_ms=1_500 if index == 1 else 0,
            )
            for index, name in enumerate(self._member_names())
        ]
        if self.settings.transactional_topic is not None:
            txn_topic, txn_partitions = self.settings.transactional_topic
            self.workers.append(
                TransactionalWorker(
                    "transactions",
                    transport=self.network.transport("transactions"),
                    bootstrap=self.bootstrap,
                    clock=self.clock,
                    history=self.history,
                    topic=txn_topic,
                    partitions=txn_partitions,
                    batch=4,
                    interval_ms=100,
                    rng=random.Random(f"transactions-{self.seed}"),
                )
            )
        if self.settings.churn:
            self.workers.append(
                TopicChurn(
                    "churn",
                    clock=self.clock,
                    history=self.history,
                    create=self._create_churn_topic,
                    delete=self._delete_topic,
                    producer_for=lambda t: self._producer(f"p-{t}", t, 1, ACKS_ALL, True),
                    interval_ms=700,
                )
            )
        for worker in self.workers:
            worker.start()

    async def _create_churn_topic(self, topic: str) -> None:
        self.partitions += await asyncio.wait_for(self.cluster.create_topic(topic, 1, 3), 5)
        self.history.set_min_insync_replicas(topic, 2)
        self.trace.note(f"created {topic}")

    async def _delete_topic(self, topic: str) -> None:
        response = await asyncio.wait_for(
            self.cluster.admin(DeleteTopicsRequest(topic_names=[topic], timeout_ms=2_000)), 5
        )
        assert isinstance(response, DeleteTopicsResponse), response
        codes = [ErrorCode.from_code(result.error_code).name for result in response.responses]
        self.trace.note(f"deleted {topic}: {', '.join(codes)}")

    # -- faults -------------------------------------------------------------------------------

    def _clients(self) -> list[str]:
        clients = ["p-idempotent", "p-all", "p-one", "p-zero", "consumer", "committer"]
        clients += self._member_names()
        return clients + (["transactions"] if self.settings.transactional_topic else [])

    def _member_names(self) -> list[str]:
        return [f"member-{n}" for n in range(self.settings.group_members)]

    def _injector(self) -> FaultInjector:
        return FaultInjector(
            self.cluster,
            self.clock,
            random.Random(f"tear-{self.seed}"),
            clients=self._clients(),
            note=self.trace.note,
            incarnations=self.incarnations,
            upcoming=self._upcoming_partitions,
        )

    async def _give_the_group_offsets(self) -> None:
        if not self.settings.group_members:
            return
        topic, _ = self.settings.topics[0]
        name = "group-setup"
        client = new_client(self.network.transport(name), self.bootstrap, self.clock, name)
        try:
            partitions = [tp for tp in self.partitions if tp.topic == topic]
            given = await give_offsets(
                client, self.bootstrap, MEMBERS_GROUP, partitions, self.clock, self.history
            )
        finally:
            await client.close()
        if not given:
            raise RuntimeError(f"group {MEMBERS_GROUP}'s first offsets were never acknowledged")

    def _upcoming_partitions(self) -> list[str]:
        return [n for w in self.workers if isinstance(w, TopicChurn) for n in w.upcoming()]

    async def _faults(self, injector: FaultInjector) -> None:
        clients = [w.name for w in self.workers if not isinstance(w, TopicChurn)]
        assert clients == self._clients(), clients
        brokers = [self.cluster.node_name(b) for b in self.cluster.broker_ids]
        plan = plan_faults(
            random.Random(f"faults-{self.seed}"),
            duration_ms=self.settings.fault_ms,
            brokers=brokers,
            clients=clients,
            controller="controller",
            pause_ms=max(LAG_MS, SESSION_MS) + 200,
            kinds=self.settings.kinds,
        )
        start_ms = self.clock.monotonic_ms()
        for fault in plan:
            wait_ms = start_ms + fault.at_ms - self.clock.monotonic_ms()
            if wait_ms > 0:
                await self.clock.sleep(wait_ms / 1000)
            await injector.apply(fault)
            if fault.hold_ms:
                await self.clock.sleep(fault.hold_ms / 1000)
            await injector.heal(fault)

    async def _heal(self, injector: FaultInjector) -> None:
        self.network.heal_all()  # each link's delay or drops were reset by its fault's heal
        if not self.cluster.controller.actor.running:
            await self.cluster.restart_controller()
        for broker_id in self.cluster.broker_ids:
            await injector.restart(broker_id)
        self.trace.note("healed everything")

    # -- liveness -----------------------------------------------------------------------------

    async def _liveness(self) -> bool:
        """The liveness steps while the workload still writes; False after the first one that
        failed (a violation recorded). Catching up is judged once the writers stop (run())."""
        cluster = self.cluster
        bound = self.settings.liveness_ms
        steps = [
            ("every partition led and served", lambda: all(map(cluster.serving, self._live()))),
            ("every pending AlterPartition resolved", self._no_pending_isr_change),
        ]
        for what, condition in steps:
            if not await self._within(condition, bound, what):
                return False
        return await self._probe_write(bound)

    def _live(self) -> list[TopicPartition]:
        deleted = self.history.deleted_topics
        return [tp for tp in self.partitions if tp.topic not in deleted]

    async def _within(self, condition: Callable[[], bool], bound_ms: int, what: str) -> bool:
        try:
            await self.cluster.run_until(condition, max_ms=bound_ms, what=what)
        except AssertionError:
            self.violations.append(
                Violation("liveness", f"{what}: not within {bound_ms} ms of healing", None)
            )
            self.trace.note(f"liveness failed: {what}")
            return False
        self.trace.note(f"liveness: {what}")
        return True

    def _no_pending_isr_change(self) -> bool:
        """No leader has an AlterPartition outstanding: a pending shrink shows only there (its
        maximal ISR is already the committed one), an expansion in the maximal ISR too. The
        coordinators' internal partitions count as well."""
        model = self.cluster.controller.actor.model
        internal = [
            TopicPartition(topic, n)
            for topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
            for n in range(INTERNAL_PARTITIONS)
        ]
        for tp in [*self._live(), *internal]:
            record = model.partition_by_name(tp)
            if record is None:
                continue  # an internal topic not created in this run
            if record.leader < 0:
                return False
            actor = self.cluster.nodes[record.leader].replica_manager.partition(tp)
            if actor is None or actor.pending_isr_change is not None:
                return False
            if actor.view.isr != actor.view.maximal_isr:
                return False
        return True

    def _members(self) -> list[GroupMemberWorker]:
        return [w for w in self.workers if isinstance(w, GroupMemberWorker)]

    def _group_caught_up(self) -> bool:
        """Every member in one generation, the partitions all assigned, and each one's owner
        has committed its high watermark (the writers have stopped)."""
        members = self._members()
        if len({m.generation for m in members}) != 1 or members[0].generation < 0:
            return False
        topic, _ = self.settings.topics[0]
        owners = {tp: m for m in members for tp in m.assigned}
        for tp in self._live():
            if tp.topic != topic:
                continue
            owner = owners.get(tp)
            if owner is None or owner.committed.get(tp, 0) != self._leader_hw(tp):
                return False
        return True

    def _transactions_ended(self) -> bool:
        """No open transaction on the transactional topic: its LSO is its HW (an abandoned one
        ends when its transaction.timeout.ms runs out and the coordinator aborts it)."""
        for tp in self._live():
            if tp.topic == self._txn_topic() and self._leader_lso(tp) != self._leader_hw(tp):
                return False
        return True

    def _caught_up(self) -> bool:
        for tp in self._live():
            record = self.cluster.record(tp)
            if sorted(record.isr) != sorted(record.replicas):
                return False
            views = [self.cluster.nodes[b].replica_manager.partition(tp) for b in record.replicas]
            if any(v is None for v in views):
                return False
            ends = {v.view.log_end_offset.message_offset for v in views if v is not None}
            hws = {v.view.high_watermark.message_offset for v in views if v is not None}
            if len(ends) != 1 or hws != ends:
                return False
        return True

    async def _probe_write(self, bound_ms: int) -> bool:
        topic, _ = self.settings.topics[0]
        probe = self._producer("probe", topic, 1, ACKS_ALL, True)
        try:
            future = await probe.producer.send(topic, None, b"probe", partition=0)
            await asyncio.wait_for(future, bound_ms / 1000)
        except Exception as error:
            self.violations.append(
                Violation("liveness", f"an acks=all write failed after healing: {error!r}", None)
            )
            self.trace.note(f"liveness failed: probe write {error!r}")
            return False
        finally:
            await probe.stop()
        self.trace.note("liveness: an acks=all write succeeded")
        return True

    # -- the final state ----------------------------------------------------------------------

    async def _read_back(self) -> None:
        """A fresh consumer reads every live partition from the start to its high watermark,
        and a read_committed one the transactional topic to its last stable offset."""
        ends = {tp: self._leader_hw(tp) for tp in self._live()}
        for record in await self._read_to("reader", ends, "read_uncommitted"):
            tp = TopicPartition(record.topic, record.partition)
            self.history.append_read(
                Read("reader", tp, record.offset, record.value, self.clock.monotonic_ns())
            )
        topic = self._txn_topic()
        if topic is None:
            return
        ends = {tp: self._leader_lso(tp) for tp in self._live() if tp.topic == topic}
        for record in await self._read_to("committed-reader", ends, "read_committed"):
            tp = TopicPartition(record.topic, record.partition)
            self.history.append_committed_read(tp, record.offset, record.value)

    async def _read_to(
        self, name: str, ends: dict[TopicPartition, int], isolation_level: str
    ) -> list[ConsumerRecord]:
        """Every record of `ends`' partitions from the start until the consumer's position
        reaches each end (bounded: each poll brings records or times out)."""
        consumer = Consumer(
            Client(
                self.bootstrap,
                transport=self.network.transport(name),
                clock=self.clock,
                config=CLIENT_CONFIG,
                client_id=name,
            ),
            config=ConsumerConfig(
                fetch_max_wait_ms=50,
                auto_offset_reset="earliest",
                request_timeout_ms=1_000,
                isolation_level=isolation_level,
            ),
            owns_client=True,
        )
        consumer.assign(list(ends))
        records: list[ConsumerRecord] = []
        try:
            for _ in range(500):
                # The position, not the last record: markers and aborted records at the end of
                # a partition are passed over without being returned.
                positions = {tp: await consumer.position(tp) for tp in ends}
                if all(positions[tp] >= end for tp, end in ends.items()):
                    break
                records += await consumer.poll(timeout_ms=100)
        finally:
            with contextlib.suppress(Exception):
                await consumer.close()
        return records

    def _txn_topic(self) -> str | None:
        txn = self.settings.transactional_topic
        return None if txn is None else txn[0]

    def _leader_lso(self, tp: TopicPartition) -> int:
        actor = self.cluster.leader(tp).replica_manager.partition(tp)
        assert actor is not None, tp
        return actor.view.last_stable_offset

    async def _read_group_offsets(self) -> None:
        client = Client(
            self.bootstrap,
            transport=self.network.transport("offsets-reader"),
            clock=self.clock,
            config=CLIENT_CONFIG,
            client_id="offsets-reader",
        )
        groups = [GROUP] + ([MEMBERS_GROUP] if self._members() else [])
        try:
            for group in groups:
                offsets = await read_group_offsets(client, self.bootstrap, group, self.clock)
                if offsets is None:
                    message = f"group {group}'s offsets not readable after healing"
                    self.violations.append(Violation("liveness", message, None))
                    continue
                for tp, offset in sorted(offsets.items()):
                    self.history.set_final_offset(group, tp, offset)
        finally:
            await client.close()

    def _leader_hw(self, tp: TopicPartition) -> int:
        actor = self.cluster.leader(tp).replica_manager.partition(tp)
        assert actor is not None, tp
        return actor.view.high_watermark.message_offset

    def _collect_final(self) -> None:
        for tp in self._live():
            record = self.cluster.record(tp)
            leader_hw = self._leader_hw(tp)
            for broker_id in record.replicas:
                if not self.cluster.running(broker_id):
                    continue
                actor = self.cluster.nodes[broker_id].replica_manager.partition(tp)
                log_dir = self.cluster.nodes[broker_id].log_manager.log_dir_of(tp)
                if actor is None or log_dir is None:
                    continue
                view = actor.view
                records, below_hw = _read_files(log_dir / tp.dir_name, leader_hw)
                self.history.append_final(
                    ReplicaState(
                        broker=broker_id,
                        tp=tp,
                        leader_epoch=view.leader_epoch,
                        is_leader=view.is_leader,
                        high_watermark=view.high_watermark.message_offset,
                        log_start_offset=view.log_start_offset,
                        log_end_offset=view.log_end_offset.message_offset,
                        records=records,
                        batch_bytes=below_hw,
                    )
                )

    async def _stop_cluster(self) -> None:
        cluster = self.cluster
        for broker_id in sorted(cluster.nodes):
            if cluster.running(broker_id):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(cluster.nodes[broker_id].stop(), 30)
        if cluster.controller.actor.running:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cluster.controller.stop(), 30)


def _read_files(partition_dir: Path, high_watermark: int) -> tuple[tuple[LoggedRecord, ...], bytes]:
    """Every data record of the replica's segment files, and the raw batches below the HW."""
    records: list[LoggedRecord] = []
    below: list[bytes] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for position, header in iter_batches(data):
            if header.last_offset < high_watermark:
                below.append(data[position : position + header.size_bytes])
            if header.is_control:
                continue
            records.extend(
                LoggedRecord(record.offset, record.value) for record in iter_records(data, position)
            )
    return tuple(records), b"".join(below)


def summarize(runs: Iterable[Figures]) -> str:
    """The figures of a batch of runs: seeds, speed, simulated time, faults, writes."""
    done = list(runs)
    if not done:
        return "seeds: 0"
    faults: Counter[str] = Counter()
    for result in done:
        faults.update(result.faults)
    failed = [r.seed for r in done if not r.ok]
    wall = sum(r.wall_s for r in done)
    per_seed_ms = [r.simulated_ms for r in done]
    acked = [r.acknowledged for r in done]
    injected = [sum(r.faults.values()) for r in done]
    kinds = ", ".join(f"{kind}={count}" for kind, count in sorted(faults.items()))
    lines = [
        f"seeds: {len(done)}, failed: {len(failed)} {failed[:20] if failed else ''}",
        f"wall: {wall:.1f} s, {len(done) / wall:.2f} seeds/s",
        f"simulated: {sum(per_seed_ms) / 1000:.1f} s, at least {min(per_seed_ms) / 1000:.1f} s"
        " per seed",
        f"acks=all acknowledged: {sum(acked)}, at least {min(acked)} per seed",
        f"offset commits acknowledged: {sum(r.commits for r in done)}",
        f"faults: {sum(injected)}, at least {min(injected)} per seed ({kinds})",
        f"torn tails: {sum(r.torn_tails for r in done)}",
    ]
    return "\n".join(lines)
