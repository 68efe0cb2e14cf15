"""`ketch produce`'s pieces (cli/produce.py): the rate pacer on a manual clock, the record sources
(stdin lines, generated records) and `produce_records` against scripted brokers (partition,
headers, compression, --count, pacing, exit tally)."""

from __future__ import annotations

import argparse
import asyncio
import io
from collections.abc import AsyncIterator

import pytest

from cli.produce import (
    Input,
    RatePacer,
    Target,
    generated_inputs,
    generated_value,
    header_arg,
    produce_records,
    rate_arg,
    stdin_inputs,
)
from client.config import ClientConfig, ProducerConfig
from client.producer import Producer
from runtime.clock import ManualClock
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until, settle
from wire.record_reader import iter_records
from wire.records import CompressionType, Record, iter_batches
from wire.topic import TopicPartition

SEED = 4242


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def cluster(clock: ManualClock) -> AsyncIterator[ScriptedCluster]:
    cluster = ScriptedCluster(clock, brokers=2, seed=SEED)
    cluster.create_topic("t", [0, 1])
    await cluster.start()
    yield cluster
    await cluster.stop()


def producer_for(cluster: ScriptedCluster, compression: CompressionType) -> Producer:
    client = cluster.client(config=ClientConfig(retry_backoff_ms=10), seed=SEED)
    config = ProducerConfig(linger_ms=0, partitioner_seed=SEED)
    return Producer(client, config=config, compression=compression, owns_client=True)


def stored(cluster: ScriptedCluster, tp: TopicPartition) -> list[tuple[CompressionType, Record]]:
    found = []
    for _, data in cluster.logs[tp].batches:
        for pos, header in iter_batches(data):
            found += [(header.compression, r) for r in iter_records(data, pos)]
    return found


async def run(clock: ManualClock, work: asyncio.Future[object] | asyncio.Task[object]) -> None:
    await advance_until(clock, work.done, step_ms=5, max_steps=2_000)


# -- pacing ---------------------------------------------------------------------------------------


async def test_the_pacer_spaces_calls_on_a_fixed_schedule(clock: ManualClock) -> None:
    pacer = RatePacer(clock, 4.0)  # every 250 ms
    returned: list[int] = []

    async def calls(count: int) -> None:
        for _ in range(count):
            await pacer.wait()
            returned.append(clock.monotonic_ms())

    task = asyncio.create_task(calls(4))
    await advance_until(clock, task.done, step_ms=1, max_steps=2_000)
    assert returned == [0, 250, 500, 750]

    # A stall (nothing asked for 1.1 s) is made up for: the calls due at 1000, 1250, 1500 and
    # 1750 return at once, then the schedule goes on where it was.
    clock.advance(1_100)
    returned.clear()
    task = asyncio.create_task(calls(6))
    await advance_until(clock, task.done, step_ms=1, max_steps=2_000)
    assert returned == [1_850, 1_850, 1_850, 1_850, 2_000, 2_250]


def test_the_pacer_refuses_a_rate_that_is_not_positive(clock: ManualClock) -> None:
    with pytest.raises(ValueError, match="positive"):
        RatePacer(clock, 0)


# -- arguments and inputs -------------------------------------------------------------------------


def test_header_and_rate_arguments() -> None:
    assert header_arg("source=cli") == ("source", b"cli")
    assert header_arg("empty=") == ("empty", b"")
    assert header_arg("flag") == ("flag", None)  # kcat's -H name: a null value
    assert header_arg("a=b=c") == ("a", b"b=c")
    assert rate_arg("2.5") == 2.5
    for bad_header in ("=v", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            header_arg(bad_header)
    for bad_rate in ("0", "-1", "fast", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            rate_arg(bad_rate)


def test_generated_values_have_their_size() -> None:
    assert generated_value(7, 5) == b"7xxxx"
    assert generated_value(123456, 3) == b"123"
    assert generated_value(0, 0) == b""


async def collect(inputs: AsyncIterator[Input]) -> list[Input]:
    return [item async for item in inputs]


async def test_stdin_lines_split_at_the_first_separator() -> None:
    lines = io.StringIO("k1:a:b\r\nno separator\n:empty key\n\nlast:x")
    assert await collect(stdin_inputs(lines, ":")) == [
        Input("line 1", b"k1", b"a:b"),
        Input("line 2", None, b"", "no key separator ':'; not sent"),
        Input("line 3", b"", b"empty key"),
        Input("line 4", None, b"", "no key separator ':'; not sent"),
        Input("line 5", b"last", b"x"),
    ]
    assert await collect(stdin_inputs(io.StringIO("v\n\n"), None)) == [
        Input("line 1", None, b"v"),
        Input("line 2", None, b""),
    ]


# -- producing ------------------------------------------------------------------------------------


async def test_every_record_goes_to_the_partition_with_the_headers_and_codec(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = producer_for(cluster, CompressionType.ZSTD)
    target = Target("t", 1, (("source", b"cli"), ("trace", None)))
    lines = io.StringIO("a:1\nb:2\nbad\nc:3\n")
    work = asyncio.ensure_future(produce_records(producer, target, stdin_inputs(lines, ":")))
    await run(clock, work)
    tally = work.result()
    assert (tally.records, tally.acknowledged, tally.failed) == (4, 3, 1)
    assert tally.failures == ["line 3: no key separator ':'; not sent"]
    assert stored(cluster, TopicPartition("t", 0)) == []
    records = stored(cluster, TopicPartition("t", 1))
    assert [(r.key, r.value) for _, r in records] == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert {codec for codec, _ in records} == {CompressionType.ZSTD}
    assert all(r.headers == target.headers for _, r in records)
    closing = asyncio.ensure_future(producer.close())
    await run(clock, closing)


async def test_count_stops_the_input_and_generated_records_are_paced(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = producer_for(cluster, CompressionType.NONE)
    pacer = RatePacer(clock, 20.0)  # every 50 ms
    work = asyncio.ensure_future(
        produce_records(producer, Target("t", 0), generated_inputs(100, 8), count=4, pacer=pacer)
    )
    await run(clock, work)
    tally = work.result()
    assert (tally.records, tally.acknowledged, tally.failed) == (4, 4, 0)
    records = [r for _, r in stored(cluster, TopicPartition("t", 0))]
    assert [r.value for r in records] == [generated_value(i, 8) for i in range(4)]
    first = records[0].timestamp
    assert [r.timestamp - first for r in records] == [0, 50, 100, 150]
    closing = asyncio.ensure_future(producer.close())
    await run(clock, closing)
    await settle()
