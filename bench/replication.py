"""Replication latency benchmark (issue 5): produce and end-to-end latency through real brokers.

    python -m bench.replication [--duration S] [--json FILE]

Everything runs in ONE process on ONE uvloop event loop: the brokers (`node.broker.node.BrokerNode`
over `TcpTransport` on 127.0.0.1, ephemeral ports, `SystemClock`), the controller (testkit/
cluster.py's `tcp_cluster`), the native producer and consumer. So the acks=all figures include the
followers' fetch and append work done on the same loop (and core) as the leader's and the
client's: on separate machines the stages would overlap, here they queue behind each other.

Phases, in order, each with a warm-up and an equal share of `--duration` (capped in messages):

* floor: the bare msgpack echo round trip of bench/rpc.py (its `echo_floor`), same run;
* acks=1: one broker, RF=1; `Producer(acks=1, linger.ms=0)`, one 100-byte message in flight;
* acks=all: three brokers, RF=3, min.insync.replicas=2; the same producer with acks=all;
* end-to-end: on the three-broker cluster, acks=all (the target's figure; also on the single
  broker with acks=1, for comparison), a consumer long-polling with
  fetch.max.wait.ms=500 reads each message; latency = the consumer's receipt - the producer's
  send. The next message is sent only once the consumer has the previous one;
* breakdown: acks=all again with the leader's and followers' components wrapped (bound
  methods replaced on the instances, in this process only) to timestamp each stage of one
  message by its offset, then acks=1 on the same three brokers the same way (its answer needs
  no follower: the stages show whether it waits behind the follower fetches its append woke,
  and how many answers were ready only after a follower's fetch answer carrying the record).
  The wrappers cost a few microseconds, so this phase's own totals are reported next to the
  clean figures.

Latencies go into HDR histograms (ns, 3 significant digits), reported in microseconds. Targets
(issue 5): acks=1 p50 <= 4x the floor p50; acks=all p50 <= 3x acks=1 p50; end-to-end p99 < 2 ms.
`--json FILE` writes every figure of the table (keys `<phase>_<p50_us|p99_us|p999_us>`,
`<phase>_messages`; phases floor, acks1, e2e_acks1, acksall, e2e,
acksall_instrumented, acks1_rf3_instrumented), `breakdown_<stage>_p50_us`,
`acks1_breakdown_<stage>_p50_us`, `acks1_answers_behind_a_follower_fetch`, `ratio_*`,
`target_*_met`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hdrh.histogram import HdrHistogram

from actors.replication.partition_messages import (
    AppendAsFollower,
    FollowerAppendResult,
    LeaderAppendResult,
)
from bench.rpc import Tally, echo_floor
from client.client import Client
from client.config import ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.producer import Producer
from node.broker.node import BrokerNode
from runtime.clock import SystemClock
from runtime.net.tcp import TcpTransport, new_event_loop
from testkit.cluster import Cluster, tcp_cluster
from wire.errors import ErrorCode
from wire.messages import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from wire.topic import TopicPartition

VALUE: Final = b"v" * 100
WARMUP: Final = 300
MAX_MESSAGES: Final = 20_000
FLOOR_REQUESTS: Final = 5_000
ACKS_LEADER: Final = 1
ACKS_ALL: Final = -1
_HISTOGRAM_MAX_NS: Final = 60 * 1_000_000_000

# Stages of one acks=all produce, in order; each is the time from the previous stamp to its own.
# "g" is the gating follower: the one whose LEO report came last (the HW waits for it, as the
# ISR here is all three replicas).
STAGES: Final = (
    ("client_to_leader", "send", "produce_in", "producer send -> leader's produce handler"),
    ("leader_append", "produce_in", "leader_appended", "leader append (actor, log)"),
    ("follower_wakeup", "leader_appended", "fetch_out", "fetch purgatory completes, reread"),
    ("fetch_to_follower", "fetch_out", "f_append_start", "fetch response -> follower"),
    ("follower_append", "f_append_start", "f_append_end", "follower append"),
    ("next_fetch", "f_append_end", "report", "next fetch reports the new LEO"),
    ("hw_advance", "report", "hw", "high watermark advances"),
    ("leader_response", "hw", "produce_out", "produce purgatory completes, answer"),
    ("response_to_client", "produce_out", "ack", "response -> producer future"),
)

# The same for one acks=1 produce on the three-broker cluster: the answer needs no follower, so
# what lies between the append and the answer is the leader's own work, or other ready work
# (the follower fetches the append woke) served first on the shared loop.
ACKS1_STAGES: Final = (
    ("client_to_leader", "send", "produce_in", "producer send -> leader's produce handler"),
    ("leader_append", "produce_in", "leader_appended", "leader append (actor, log)"),
    ("leader_response", "leader_appended", "produce_out", "append -> answer ready"),
    ("response_to_client", "produce_out", "ack", "response -> producer future"),
)


def _now() -> int:
    return time.perf_counter_ns()


def _histogram() -> HdrHistogram:
    return HdrHistogram(1, _HISTOGRAM_MAX_NS, 3)


def _percentiles(histogram: HdrHistogram, prefix: str, figures: dict[str, Any]) -> None:
    for name, percentile in (("p50", 50.0), ("p99", 99.0), ("p999", 99.9)):
        value_ns: int = histogram.get_value_at_percentile(percentile)
        figures[f"{prefix}_{name}_us"] = round(value_ns / 1000, 1)
    figures[f"{prefix}_messages"] = histogram.get_total_count()


async def _timed(budget_s: float, step: Callable[[], Awaitable[int | None]]) -> HdrHistogram:
    """Warm up, then call `step` (which returns a latency in ns, or None to skip) until the
    budget is spent or MAX_MESSAGES are measured."""
    for _ in range(WARMUP):
        await step()
    histogram = _histogram()
    deadline = _now() + int(budget_s * 1e9)
    while histogram.get_total_count() < MAX_MESSAGES and _now() < deadline:
        latency = await step()
        if latency is not None:
            histogram.record_value(latency)
    return histogram


def _producer(cluster: Cluster, transport: TcpTransport, acks: int) -> Producer:
    client = Client(
        cluster.addresses, transport=transport, clock=SystemClock(), client_id="bench-producer"
    )
    config = ProducerConfig(acks=acks, linger_ms=0)
    return Producer(client, config=config, owns_client=True)


async def _produce_latency(producer: Producer, tp: TopicPartition, budget_s: float) -> HdrHistogram:
    async def step() -> int:
        began = _now()
        await producer.send_and_wait(tp.topic, None, VALUE, partition=tp.partition)
        return _now() - began

    return await _timed(budget_s, step)


async def _end_to_end(
    cluster: Cluster,
    transport: TcpTransport,
    producer: Producer,
    tp: TopicPartition,
    budget_s: float,
) -> HdrHistogram:
    start = await producer.send_and_wait(tp.topic, None, VALUE, partition=tp.partition)
    client = Client(
        cluster.addresses, transport=transport, clock=SystemClock(), client_id="bench-consumer"
    )
    consumer = Consumer(client, config=ConsumerConfig(fetch_max_wait_ms=500), owns_client=True)
    consumer.assign([tp])
    consumer.seek(tp, start.offset + 1)
    received: dict[int, asyncio.Future[int]] = {}
    loop = asyncio.get_running_loop()

    def arrival(offset: int) -> asyncio.Future[int]:
        return received.setdefault(offset, loop.create_future())

    async def consume() -> None:
        while True:
            for record in await consumer.poll(timeout_ms=1_000):
                arrival(record.offset).set_result(_now())

    async def step() -> int:
        sent = _now()
        meta = await producer.send_and_wait(tp.topic, None, VALUE, partition=tp.partition)
        got = await asyncio.wait_for(arrival(meta.offset), timeout=5.0)
        del received[meta.offset]
        return got - sent

    reader = asyncio.ensure_future(consume())
    try:
        return await _timed(budget_s, step)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await consumer.close()


# -- breakdown ------------------------------------------------------------------------------------


class _Stamps:
    """Per offset, the time each stage was reached (perf_counter ns; one process, one clock)."""

    def __init__(self) -> None:
        self.by_offset: dict[int, dict[str, int]] = {}

    def first(self, offset: int, stage: str, at: int) -> None:
        self.by_offset.setdefault(offset, {}).setdefault(stage, at)

    def last(self, offset: int, stage: str, at: int) -> None:
        self.by_offset.setdefault(offset, {})[stage] = at


def _instrument(leader: BrokerNode, followers: Sequence[BrokerNode], tp: TopicPartition) -> _Stamps:
    """Wrap bound methods on these instances (only in this process) to stamp each stage."""
    stamps = _Stamps()
    current: list[int] = [-1]  # the offset of the produce in flight (one at a time)
    path = leader.request_path
    delayed = leader.delayed
    partition = leader.replica_manager.partition(tp)
    assert partition is not None, tp

    append = path._append

    async def stamped_append(
        tp: TopicPartition, records: bytes | memoryview, acks: int, *, duplicated: bool
    ) -> LeaderAppendResult | ErrorCode:
        began = _now()
        result = await append(tp, records, acks, duplicated=duplicated)
        if isinstance(result, LeaderAppendResult) and result.info is not None:
            current[0] = result.info.first_offset
            stamps.first(result.info.first_offset, "produce_in", began)
        return result

    produce = path.produce

    async def stamped_produce(request: ProduceRequest) -> ProduceResponse:
        response = await produce(request)
        stamps.first(current[0], "produce_out", _now())
        return response

    on_leader_append = delayed.on_leader_append

    def stamped_leader_append(topic_partition: TopicPartition) -> None:
        stamps.first(partition.view.log_end_offset.message_offset - 1, "leader_appended", _now())
        on_leader_append(topic_partition)

    on_hw = delayed.on_high_watermark_advanced

    def stamped_hw(topic_partition: TopicPartition) -> None:
        stamps.first(partition.view.high_watermark.message_offset - 1, "hw", _now())
        on_hw(topic_partition)

    fetch = path.fetch

    async def stamped_fetch(request: FetchRequest) -> FetchResponse:
        replica = request.replica_id
        offsets = [
            p.fetch_offset
            for t in request.topics
            if t.topic == tp.topic
            for p in t.partitions
            if p.partition == tp.partition
        ]
        if replica >= 0:
            for offset in offsets:
                stamps.first(offset - 1, f"report:{replica}", _now())
        response = await fetch(request)
        if replica >= 0:
            # The fetch that carried offset o is the last one sent from o.
            for offset in offsets:
                stamps.last(offset, f"fetch_out:{replica}", _now())
        return response

    path._append = stamped_append  # type: ignore[method-assign]
    path.produce = stamped_produce  # type: ignore[method-assign]
    path.fetch = stamped_fetch  # type: ignore[method-assign]
    delayed.on_leader_append = stamped_leader_append  # type: ignore[method-assign]
    delayed.on_high_watermark_advanced = stamped_hw  # type: ignore[method-assign]

    for follower in followers:
        actor = follower.replica_manager.partition(tp)
        assert actor is not None, (follower.broker_id, tp)
        broker = follower.broker_id
        ask = actor.ask

        async def stamped_ask(message: Any, ask: Any = ask, broker: int = broker) -> Any:
            began = _now()
            result = await ask(message)
            if (
                isinstance(message, AppendAsFollower)
                and isinstance(result, FollowerAppendResult)
                and result.info is not None
                and result.info.valid_bytes > 0
            ):
                stamps.first(result.info.first_offset, f"f_append_start:{broker}", began)
                stamps.first(result.info.first_offset, f"f_append_end:{broker}", _now())
            return result

        actor.ask = stamped_ask  # type: ignore[method-assign]
    return stamps


@dataclass
class _Breakdown:
    """What the instrumented runs measured: the acks=all stages, the acks=1 stages, and how
    many acks=1 answers were ready only after a follower's fetch answer carrying the record."""

    acksall: HdrHistogram
    durations: dict[str, list[int]]
    acks1: HdrHistogram
    acks1_durations: dict[str, list[int]]
    acks1_behind_a_follower: int = 0


async def _breakdown(
    cluster: Cluster,
    producer: Producer,
    acks1_producer: Producer,
    tp: TopicPartition,
    budget_s: float,
) -> _Breakdown:
    leader = cluster.leader(tp)
    followers = [n for b, n in sorted(cluster.nodes.items()) if n is not leader]
    follower_ids = [n.broker_id for n in followers]
    stamps = _instrument(leader, followers, tp)
    durations: dict[str, list[int]] = {name: [] for name, *_ in STAGES}
    acks1_durations: dict[str, list[int]] = {name: [] for name, *_ in ACKS1_STAGES}
    behind = [0]
    measuring = [False]

    async def send(with_producer: Producer) -> tuple[dict[str, int], int, int]:
        sent = _now()
        meta = await with_producer.send_and_wait(tp.topic, None, VALUE, partition=tp.partition)
        acked = _now()
        seen = stamps.by_offset.pop(meta.offset, {})
        stamps.by_offset.pop(meta.offset - 1, None)  # stale entries for earlier offsets
        return seen, sent, acked

    async def step() -> int:
        seen, sent, acked = await send(producer)
        if measuring[0]:
            _collect(seen, sent, acked, follower_ids, durations)
        return acked - sent

    async def acks1_step() -> int:
        seen, sent, acked = await send(acks1_producer)
        if measuring[0]:
            times = {"send": sent, "ack": acked, **seen}
            if all(name in times for _, start, end, _ in ACKS1_STAGES for name in (start, end)):
                for stage, start, end, _ in ACKS1_STAGES:
                    acks1_durations[stage].append(times[end] - times[start])
                answered = [seen.get(f"fetch_out:{b}") for b in follower_ids]
                if any(at is not None and at < seen["produce_out"] for at in answered):
                    behind[0] += 1
        return acked - sent

    for _ in range(WARMUP):
        await step()
        await acks1_step()
    measuring[0] = True
    acksall = await _timed_no_warmup(budget_s / 2, step)
    acks1 = await _timed_no_warmup(budget_s / 2, acks1_step)
    return _Breakdown(acksall, durations, acks1, acks1_durations, behind[0])


async def _timed_no_warmup(budget_s: float, step: Callable[[], Awaitable[int]]) -> HdrHistogram:
    histogram = _histogram()
    deadline = _now() + int(budget_s * 1e9)
    while histogram.get_total_count() < MAX_MESSAGES and _now() < deadline:
        histogram.record_value(await step())
    return histogram


def _collect(
    seen: dict[str, int],
    sent: int,
    acked: int,
    follower_ids: Sequence[int],
    durations: dict[str, list[int]],
) -> None:
    """One message's stage durations, following the gating follower; a message missing any
    stamp (e.g. its data rode on a fetch answered before the purgatory) is left out."""
    reports = {b: seen.get(f"report:{b}") for b in follower_ids}
    if any(at is None for at in reports.values()):
        return
    gating = max(follower_ids, key=lambda b: reports[b] or 0)
    times = {"send": sent, "ack": acked}
    for name in ("produce_in", "leader_appended", "hw", "produce_out"):
        if name not in seen:
            return
        times[name] = seen[name]
    for name in ("fetch_out", "f_append_start", "f_append_end", "report"):
        key = f"{name}:{gating}"
        if key not in seen:
            return
        times[name] = seen[key]
    for stage, start, end, _ in STAGES:
        durations[stage].append(times[end] - times[start])


# -- driver ---------------------------------------------------------------------------------------


async def _measure(duration_s: float) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    share = duration_s / 6

    floor = Tally()
    await echo_floor(FLOOR_REQUESTS, WARMUP, floor, Tally())  # its 64-in-flight half is unused
    _percentiles(floor.histogram, "floor", figures)

    transport = TcpTransport()
    clock = SystemClock()
    async with tcp_cluster(1, transport=transport, clock=clock) as single:
        [tp] = await single.create_topic("bench-acks1", replication_factor=1)
        producer = _producer(single, transport, ACKS_LEADER)
        try:
            _percentiles(await _produce_latency(producer, tp, share), "acks1", figures)
            e2e1 = await _end_to_end(single, transport, producer, tp, share)
            _percentiles(e2e1, "e2e_acks1", figures)
        finally:
            await producer.close()

    properties = {"min.insync.replicas": 2}
    async with tcp_cluster(3, transport=transport, clock=clock, properties=properties) as trio:
        [tp] = await trio.create_topic("bench-acksall", replication_factor=3)
        producer = _producer(trio, transport, ACKS_ALL)
        acks1_producer = _producer(trio, transport, ACKS_LEADER)
        try:
            _percentiles(await _produce_latency(producer, tp, share), "acksall", figures)
            e2e = await _end_to_end(trio, transport, producer, tp, share)
            _percentiles(e2e, "e2e", figures)
            measured = await _breakdown(trio, producer, acks1_producer, tp, share)
            _percentiles(measured.acksall, "acksall_instrumented", figures)
            _percentiles(measured.acks1, "acks1_rf3_instrumented", figures)
        finally:
            await producer.close()
            await acks1_producer.close()
    for prefix, stages, durations in (
        ("breakdown", STAGES, measured.durations),
        ("acks1_breakdown", ACKS1_STAGES, measured.acks1_durations),
    ):
        figures[f"{prefix}_messages"] = len(durations[stages[0][0]])
        for stage, *_ in stages:
            samples = durations[stage]
            figures[f"{prefix}_{stage}_p50_us"] = (
                round(statistics.median(samples) / 1000, 1) if samples else None
            )
    figures["acks1_answers_behind_a_follower_fetch"] = measured.acks1_behind_a_follower
    figures["ratio_acks1_to_floor_p50"] = round(
        figures["acks1_p50_us"] / figures["floor_p50_us"], 2
    )
    figures["ratio_acksall_to_acks1_p50"] = round(
        figures["acksall_p50_us"] / figures["acks1_p50_us"], 2
    )
    figures["target_acks1_within_4x_floor_met"] = figures["ratio_acks1_to_floor_p50"] <= 4
    figures["target_acksall_within_3x_acks1_met"] = figures["ratio_acksall_to_acks1_p50"] <= 3
    figures["target_e2e_p99_under_2ms_met"] = figures["e2e_p99_us"] < 2_000
    return figures


def _print_table(figures: dict[str, Any]) -> None:
    print("bench.replication: uvloop, 127.0.0.1 TCP, 100-byte values, 1 message in flight")
    print(
        "NOTE: all brokers, the controller and the clients share ONE process and ONE event loop\n"
        "      (one core): acks=all and end-to-end include the followers' work on that loop."
    )
    print(f"{'':50}{'p50 us':>9}{'p99 us':>9}{'p999 us':>9}{'msgs':>8}")
    rows = (
        ("floor (bare msgpack echo)", "floor"),
        ("acks=1, 1 broker, RF=1", "acks1"),
        ("acks=all, 3 brokers, RF=3, min.isr=2", "acksall"),
        ("end-to-end, 1 broker (acks=1, max_wait 500)", "e2e_acks1"),
        ("end-to-end, 3 brokers (acks=all, max_wait 500)", "e2e"),
        ("acks=all, instrumented (breakdown run)", "acksall_instrumented"),
        ("acks=1, 3 brokers, RF=3, instrumented", "acks1_rf3_instrumented"),
    )
    for label, key in rows:
        values = [figures[f"{key}_{k}"] for k in ("p50_us", "p99_us", "p999_us", "messages")]
        print(f"  {label:48}{values[0]:>9}{values[1]:>9}{values[2]:>9}{values[3]:>8}")
    print(f"acks=all breakdown, median per stage ({figures['breakdown_messages']} messages):")
    for stage, _, _, label in STAGES:
        value = figures[f"breakdown_{stage}_p50_us"]
        print(f"  {stage:20}{label:46}{value if value is not None else '-':>9} us")
    messages = figures["acks1_breakdown_messages"]
    print(f"acks=1 on 3 brokers, median per stage ({messages} messages):")
    for stage, _, _, label in ACKS1_STAGES:
        value = figures[f"acks1_breakdown_{stage}_p50_us"]
        print(f"  {stage:20}{label:46}{value if value is not None else '-':>9} us")
    behind = figures["acks1_answers_behind_a_follower_fetch"]
    print(f"  answers ready only after a follower's fetch answer carrying them: {behind}")

    def verdict(key: str) -> str:
        return "met" if figures[key] else "NOT met"

    print(
        f"acks=1 p50 = {figures['ratio_acks1_to_floor_p50']}x floor p50 (target <= 4x): "
        f"{verdict('target_acks1_within_4x_floor_met')}"
    )
    print(
        f"acks=all p50 = {figures['ratio_acksall_to_acks1_p50']}x acks=1 p50 (target <= 3x): "
        f"{verdict('target_acksall_within_3x_acks1_met')}"
    )
    print(
        f"end-to-end p99 = {figures['e2e_p99_us']} us (target < 2000 us): "
        f"{verdict('target_e2e_p99_under_2ms_met')}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.replication", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--duration", type=float, default=40.0, help="measuring time in seconds, split in 6"
    )
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.duration <= 0:
        parser.error("--duration must be positive")
    loop = new_event_loop()
    try:
        figures = loop.run_until_complete(_measure(args.duration))
    finally:
        loop.close()
    _print_table(figures)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
