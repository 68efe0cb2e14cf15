"""`ketch consume`'s flags and start positions (cli/consume.py): kcat's --offset forms,
--from-timestamp, flags that do not go together (usage errors with consume's own usage), and
where `seek_to_start` puts each partition, against scripted brokers on a manual clock."""

from __future__ import annotations

import argparse
import asyncio
import datetime
from collections.abc import AsyncIterator

import pytest

from cli import data as cli_data
from cli.consume import StartAt, format_arg, offset_arg, seek_to_start, timestamp_arg
from client.config import ClientConfig, ConsumerConfig
from client.consumer import Consumer
from runtime.clock import ManualClock
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until
from wire.batch_builder import build_batch
from wire.topic import TopicPartition

SEED = 5151
NOWHERE = "127.0.0.1:1"  # never contacted: these commands stop at their flags
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def test_offset_forms() -> None:
    assert offset_arg("beginning") == StartAt("beginning")
    assert offset_arg("end") == StartAt("end")
    assert offset_arg("42") == StartAt("offset", 42)
    assert offset_arg("0") == StartAt("offset", 0)
    assert offset_arg("-5") == StartAt("relative", 5)
    for bad in ("-0", "stored", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            offset_arg(bad)


def test_timestamps_in_ms_or_iso_8601() -> None:
    assert timestamp_arg("1700000000123") == StartAt("timestamp", 1_700_000_000_123)
    assert timestamp_arg("2024-01-02T03:04:05Z") == StartAt("timestamp", 1_704_164_645_000)
    assert timestamp_arg("2024-01-02T04:04:05.250+01:00") == StartAt("timestamp", 1_704_164_645_250)
    local = datetime.datetime(2024, 1, 2, 3, 4, 5).timestamp()  # no zone: local time
    assert timestamp_arg("2024-01-02T03:04:05") == StartAt("timestamp", int(local * 1000))
    with pytest.raises(argparse.ArgumentTypeError, match="date-time"):
        timestamp_arg("yesterday")


def test_a_bad_format_is_a_usage_error() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="unknown format token %q"):
        format_arg("%q")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--group", "g", "--partition", "0"], "--partition does not apply with --group"),
        (["--group", "g", "--offset", "5"], "committed offset"),
        (["--group", "g", "--from-timestamp", "5"], "committed offset"),
        (["--format", "%s", "-K", ":"], "--format says what to print"),
        (["--json", "--print-offsets"], "--json says what to print"),
        (["--json", "--format", "%s"], "not allowed with argument"),
        (["--offset", "end", "--from-beginning"], "not allowed with argument"),
        (["--offset", "later"], "not beginning, end, N or -N"),
    ],
)
def test_flags_that_do_not_go_together(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_data.main(["consume", "t", "--bootstrap", NOWHERE, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ketch consume"), err
    assert message in err


@pytest.mark.parametrize(
    ("argv", "command", "unknown"),
    [
        (["consume", "t", "--bogus"], "consume", "--bogus"),
        (["produce", "t", "-X", "acks=1"], "produce", "-X acks=1"),
        (["topic", "create", "t", "--yaml"], "topic create", "--yaml"),
    ],
)
def test_an_unknown_flag_prints_the_subcommands_usage(
    argv: list[str], command: str, unknown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the `ketch` entry point (cli/main.py): the subcommand's usage, not `ketch`'s."""
    from cli.main import main

    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--bootstrap", NOWHERE])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: ketch {command} [-h]"), err
    assert f"ketch {command}: error: unrecognized arguments: {unknown}" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--size", "10"], "--size generates records and needs --count"),
        (["--size", "10", "--count", "2", "-K", ":"], "generated records have no keys"),
        (["--compression", "brotli"], "invalid choice"),
        (["--header", "=v"], "a header needs a name"),
    ],
)
def test_produce_flags_that_do_not_go_together(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_data.main(["produce", "t", "--bootstrap", NOWHERE, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ketch produce"), err
    assert message in err


@pytest.fixture
async def cluster() -> AsyncIterator[ScriptedCluster]:
    cluster = ScriptedCluster(ManualClock(), brokers=2, seed=SEED)
    cluster.create_topic("t", [0, 1])
    for tp, count in ((TP0, 10), (TP1, 3)):
        stamps = [1_000 + 10 * i for i in range(count)]
        values = [(None, f"{tp.partition}-{i}".encode()) for i in range(count)]
        cluster.logs[tp].append(build_batch(values, timestamps=stamps))
    cluster.logs[TP0].log_start_offset = 2  # records 0 and 1 were deleted
    await cluster.start()
    yield cluster
    await cluster.stop()


async def positions(cluster: ScriptedCluster, start: StartAt) -> dict[int, int]:
    clock = cluster.clock
    assert isinstance(clock, ManualClock)
    client = cluster.client(config=ClientConfig(retry_backoff_ms=10), seed=SEED)
    consumer = Consumer(client, config=ConsumerConfig(), owns_client=True)
    consumer.assign([TP0, TP1])

    async def work() -> dict[int, int]:
        await seek_to_start(consumer, [TP0, TP1], start)
        return {tp.partition: await consumer.position(tp) for tp in (TP0, TP1)}

    task = asyncio.ensure_future(work())
    await advance_until(clock, task.done, step_ms=5, max_steps=1_000)
    closing = asyncio.ensure_future(consumer.close())
    await advance_until(clock, closing.done, step_ms=5, max_steps=1_000)
    return task.result()


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (StartAt("offset", 5), {0: 5, 1: 3}),  # past partition 1's end: its end
        (StartAt("offset", 0), {0: 2, 1: 0}),  # below partition 0's log start: its start
        (StartAt("relative", 4), {0: 6, 1: 0}),  # -4: four before the end, or the start
        (StartAt("timestamp", 1_025), {0: 3, 1: 3}),  # none at/after in partition 1: the end
        (StartAt("timestamp", 0), {0: 2, 1: 0}),
        (StartAt("end"), {0: 10, 1: 3}),  # left to auto.offset.reset (latest here)
    ],
)
async def test_where_each_partition_starts(
    cluster: ScriptedCluster, start: StartAt, expected: dict[int, int]
) -> None:
    assert await positions(cluster, start) == expected
