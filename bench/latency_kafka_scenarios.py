"""The scenarios of `ketch bench latency --protocol kafka`: the native scenarios' shapes
(bench/latency_scenarios.py), driven by a Kafka client (bench/latency_kafka_clients.py) through
a broker's Kafka listener, so the very same code measures ketch and a `--peer-cmd` broker.

* produce_acks0/1/all[client]: one producer, linger.ms=0, partition 0, closed or open loop
  (`drive`); acks=0 ends when the client reports the record sent, the others when acknowledged.
* e2e[client]: produce (acks=all) until a consumer assigned to partition 0 (no group, nothing
  committed), long-polling with fetch max wait 500 ms, has the record in hand.
* throughput_acks1/all[client]: THROUGHPUT_PRODUCERS producers, 16 KB batches, linger 5 ms,
  THROUGHPUT_PARTITIONS partitions, each producer keeping a few batches' worth of records
  outstanding, flat out; latency per record under that load, count by acknowledgement time.

Topics are created through the client's own admin API with a run-unique name per scenario and
client, RF and min.insync.replicas as the target says, and the scenario waits until Metadata
shows a leader for every partition and (RF > 1) one acks=all record per partition went through.

Everything runs on the caller's event loop; a scenario's state lives in its coroutine's locals
and in callbacks on that loop (the clients post their reports there), so nothing needs a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

from bench.latency_kafka_clients import (
    Batching,
    KafkaClient,
    KafkaClientError,
    Producer,
)
from bench.latency_report import ScenarioResult
from bench.latency_scenarios import (
    E2E_ARRIVAL_TIMEOUT_S,
    E2E_FETCH_MAX_WAIT_MS,
    THROUGHPUT_BATCH_BYTES,
    THROUGHPUT_LINGER_MS,
    THROUGHPUT_PARTITIONS,
    THROUGHPUT_PRODUCERS,
    Acked,
    Load,
    SendRecord,
    acks_name,
    drive,
    throughput_run,
)
from client.config import ACKS_ALL

THROUGHPUT_BATCHING: Final = Batching(
    linger_ms=THROUGHPUT_LINGER_MS, batch_bytes=THROUGHPUT_BATCH_BYTES
)
TOPIC_READY_TIMEOUT_S: Final = 30.0
_TOPIC_POLL_S: Final = 0.05


def scenario_name(base: str, client: str) -> str:
    """`produce_acks1[confluent]`: the native scenario's name with the client in brackets."""
    return f"{base}[{client}]"


def acks_suffix(acks: int) -> str:
    return "_all" if acks == ACKS_ALL else str(acks)


@dataclass(frozen=True, slots=True)
class KafkaTarget:
    """A broker (cluster) measured through its Kafka listener: ketch's, or the peer."""

    label: str  # "ketch" or "peer"
    bootstrap: str  # host:port[,host:port...]
    replication_factor: int
    min_insync_replicas: int


class KafkaBench:
    """One client against one target, for one run: topics get a run-unique name."""

    def __init__(self, target: KafkaTarget, client: KafkaClient, run_id: str) -> None:
        self.target = target
        self.client = client
        self._run_id = run_id

    async def producer(
        self, acks: int, batching: Batching | None = None
    ) -> contextlib.AbstractAsyncContextManager[Producer]:
        if batching is None:
            return await self.client.producer(self.target.bootstrap, acks)
        return await self.client.producer(self.target.bootstrap, acks, batching)

    async def create_topic(self, scenario: str, partitions: int = 1) -> str:
        """Creates the scenario's topic and waits until it takes acks=all writes."""
        target = self.target
        name = f"ketch-bench-{scenario}-{self.client.name}-{self._run_id}"
        configs = {"min.insync.replicas": str(target.min_insync_replicas)}
        await self.client.create_topic(
            target.bootstrap, name, partitions, target.replication_factor, configs
        )
        deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
        while not await self.client.leaders_known(target.bootstrap, name, partitions):
            if time.monotonic() > deadline:
                raise KafkaClientError(
                    f"topic {name} on {target.label} has no leader for every partition after "
                    f"{TOPIC_READY_TIMEOUT_S:.0f} s"
                )
            await asyncio.sleep(_TOPIC_POLL_S)
        if target.replication_factor > 1:
            # A leader is not yet a replicated partition (followers still learning their
            # role): one acks=all record per partition proves the ISR answers, so no
            # scenario's first samples wait for that.
            async with await self.producer(ACKS_ALL) as producer:
                await asyncio.wait_for(
                    asyncio.gather(
                        *(producer.send_and_wait(name, b"ready", p) for p in range(partitions))
                    ),
                    TOPIC_READY_TIMEOUT_S,
                )
        return name

    def describe(self) -> str:
        t = self.target
        return (
            f"{self.client.name} -> {t.label}, RF={t.replication_factor}, "
            f"min.insync.replicas={t.min_insync_replicas}"
        )


async def produce_scenario(bench: KafkaBench, acks: int, load: Load) -> ScenarioResult:
    topic = await bench.create_topic(f"acks{acks_name(acks)}")
    value = load.value
    async with await bench.producer(acks) as producer:

        async def step(_intended: int) -> int:
            done_ns, _offset = await producer.send_and_wait(topic, value, 0)
            return done_ns

        window = await drive(step, load)
    what = "until reported sent" if acks == 0 else "until acknowledged"
    return ScenarioResult(
        scenario_name(f"produce_acks{acks_suffix(acks)}", bench.client.name),
        f"produce acks={acks_name(acks)}, linger.ms=0, {bench.describe()}, {what}",
        window.histogram,
        window.elapsed_s,
        window.started_at_s,
    )


async def e2e_scenario(bench: KafkaBench, load: Load) -> ScenarioResult:
    topic = await bench.create_topic("e2e")
    value = load.value
    loop = asyncio.get_running_loop()
    arrivals: dict[int, asyncio.Future[int]] = {}

    def arrival(offset: int) -> asyncio.Future[int]:
        return arrivals.setdefault(offset, loop.create_future())

    def arrived(offset: int, received_ns: int) -> None:
        future = arrival(offset)
        if not future.done():
            future.set_result(received_ns)

    async with await bench.producer(ACKS_ALL) as producer:
        # Its offset is the end of the log: the consumer starts right after it.
        _, first = await producer.send_and_wait(topic, value, 0)
        assert first >= 0, first  # acks=all: the broker says where it went
        async with await bench.client.consumer(
            bench.target.bootstrap, topic, 0, first + 1, E2E_FETCH_MAX_WAIT_MS, arrived
        ):

            async def step(_intended: int) -> int:
                _, offset = await producer.send_and_wait(topic, value, 0)
                got = await asyncio.wait_for(arrival(offset), timeout=E2E_ARRIVAL_TIMEOUT_S)
                del arrivals[offset]
                return got

            # One record through before the clock starts: the consumer's first poll includes
            # its start (metadata, the partition's leader, a first fetch), which can outlast a
            # short run's whole window and leave it without a measured record.
            await step(0)
            window = await drive(step, load)
    return ScenarioResult(
        scenario_name("e2e", bench.client.name),
        f"produce (acks=all) -> consumer poll returns it, fetch max wait "
        f"{E2E_FETCH_MAX_WAIT_MS} ms, {bench.describe()}",
        window.histogram,
        window.elapsed_s,
        window.started_at_s,
    )


async def throughput_scenario(bench: KafkaBench, acks: int, load: Load) -> ScenarioResult:
    """The native throughput scenario (`throughput_run`) with the Kafka client's producer."""
    topic = await bench.create_topic(f"throughput-acks{acks_name(acks)}", THROUGHPUT_PARTITIONS)
    value = load.value

    @contextlib.asynccontextmanager
    async def open_producer() -> AsyncIterator[SendRecord]:
        async with await bench.producer(acks, THROUGHPUT_BATCHING) as producer:

            async def send(acked: Acked) -> None:
                def delivered(done_ns: int, _offset: int, error: BaseException | None) -> None:
                    acked(done_ns, error)

                await producer.send(topic, value, None, delivered)

            yield send

    return await throughput_run(
        load,
        open_producer,
        name=scenario_name(f"throughput_acks{acks_suffix(acks)}", bench.client.name),
        description=(
            f"{THROUGHPUT_PRODUCERS} producers, {THROUGHPUT_BATCH_BYTES // 1024} KB batches, "
            f"linger {THROUGHPUT_LINGER_MS} ms, {THROUGHPUT_PARTITIONS} partitions, acks="
            f"{acks_name(acks)}, {bench.describe()}: records acknowledged within the window"
        ),
    )
