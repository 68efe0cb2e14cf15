"""The cluster in real processes: `ketch controller` and `ketch broker` (`python -m cli.main`),
on 127.0.0.1, with testkit.processes.ProcessCluster as the harness. (Long, ~520 lines: the
failover scenario and its checks read as one story.)

The failover test: a controller and three brokers, a topic with 3 partitions, RF=3 and
min.insync.replicas=2 created through a broker; a producer (client/producer.py, acks=all,
retries on) writes continuously from the test process while the leader of each partition in turn
is killed with SIGKILL, replaced by the controller once its session times out, restarted, and
waited for until it is back in the ISR. Afterwards every acknowledged record is readable where its
acknowledgement said, each partition's records are in send order and each only once (the producer
is idempotent, as ketch's is by default with acks=all: a retried batch is never written twice,
issue 19), and after a clean stop of every node the three replicas hold identical batch bytes
below the high watermark.

The processes run on the wall clock, so waits are bounded polls of a condition (the harness's
`wait_until`), never sleeps standing in for one; every child is killed by PID in a `finally`.
The other tests cover `ketch controller`'s own contract: exit codes, the secret lookup, the
config, and the shared run loop of node/process.py (in-process, with a fake node).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from client.config import ClientConfig, ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.fetched_records import ConsumerRecord
from client.producer import Producer, RecordMetadata
from node import process
from node.controller.main import build_parser, main, settings_from_args
from node.process import EXIT_CONFIG
from runtime.config import ConfigError, Source, Value
from runtime.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from testkit.probes import create_topic, partitions_of, wait_fully_replicated, wait_until
from testkit.processes import REPO, ProcessCluster, running_cluster, toml_text
from tests.integration.cluster_properties import PROPERTIES
from wire.records import iter_batches
from wire.topic import TopicPartition

TOPIC: Final = "events"
PARTITIONS: Final = 3
WAIT_S: Final = 20.0
SECRET: Final = b"controller-main-test-secret-0123456789"
CLIENT_CONFIG: Final = ClientConfig(
    request_timeout_ms=1_000,
    reconnect_backoff_ms=10,
    reconnect_backoff_max_ms=100,
    retry_backoff_ms=20,
    retry_backoff_max_ms=200,
)
# In flight at once from the writer: enough to keep every partition's batch busy.
MAX_OUTSTANDING: Final = 60
# Acknowledgements to see after each failover before moving on: the new leader takes writes.
PROGRESS_PER_PHASE: Final = 60


def value_of(partition: int, seq: int) -> bytes:
    return b"p%d-%07d" % (partition, seq)


def seq_of(value: bytes | None) -> int:
    assert value is not None
    return int(value.split(b"-")[1])


@dataclass
class Writer:
    """Sends record after record, round-robin over the partitions, with at most MAX_OUTSTANDING
    unacknowledged; the producer's one batch in flight per partition and retries at the head of
    the queue keep each partition's records in send order."""

    producer: Producer
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    sent: list[int] = field(default_factory=lambda: [0] * PARTITIONS)
    acked: list[dict[int, int]] = field(default_factory=lambda: [{} for _ in range(PARTITIONS)])
    failures: list[str] = field(default_factory=list)

    @property
    def acked_total(self) -> int:
        return sum(len(a) for a in self.acked)

    async def run(self) -> None:
        outstanding: list[tuple[int, int, asyncio.Future[RecordMetadata]]] = []
        i = 0
        while not self.stop.is_set():
            partition = i % PARTITIONS
            seq = self.sent[partition]
            self.sent[partition] += 1
            future = await self.producer.send(
                TOPIC, None, value_of(partition, seq), partition=partition
            )
            outstanding.append((partition, seq, future))
            i += 1
            if len(outstanding) >= MAX_OUTSTANDING:
                await self._settle(*outstanding.pop(0))
            # Pacing, not a wait for a condition: a steady stream, not a flood of full batches.
            await asyncio.sleep(0.002)
        for item in outstanding:
            await self._settle(*item)

    async def _settle(
        self, partition: int, seq: int, future: asyncio.Future[RecordMetadata]
    ) -> None:
        try:
            metadata = await future
        except Exception as exc:  # a failed delivery is a finding, reported by the test
            self.failures.append(f"p{partition} seq {seq}: {exc!r}")
            return
        self.acked[partition][seq] = metadata.offset


async def until_acked(writer: Writer, count: int, what: str) -> None:
    async def enough() -> bool:
        return writer.acked_total >= count

    await wait_until(enough, what, timeout_s=WAIT_S)


async def read_partitions(cluster: ProcessCluster, ends: dict[int, int]) -> list[ConsumerRecord]:
    consumer = Consumer(
        cluster.client(),
        config=ConsumerConfig(
            fetch_max_wait_ms=50, auto_offset_reset="earliest", request_timeout_ms=1_000
        ),
        owns_client=True,
    )
    consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
    records: list[ConsumerRecord] = []
    counts = dict.fromkeys(range(PARTITIONS), 0)
    try:
        for _ in range(2_000):  # bounded; each poll brings records or times out
            if all(counts[p] >= ends[p] for p in range(PARTITIONS)):
                break
            for record in await consumer.poll(timeout_ms=200):
                records.append(record)
                counts[record.partition] += 1
    finally:
        await consumer.close()
    return records


def batches_below(partition_dir: Path, high_watermark: int) -> list[bytes]:
    """The stored bytes of every batch below the high watermark, in offset order."""
    out: list[bytes] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for pos, header in iter_batches(data):
            if header.last_offset < high_watermark:
                out.append(data[pos : pos + header.size_bytes])
    return out


async def kill_leader_and_restart(cluster: ProcessCluster, writer: Writer, partition: int) -> int:
    """Kill the partition's leader, wait for its successor and for writes to flow, restart the
    killed broker and wait until every partition has its full ISR again. The killed broker."""
    client = cluster.client()
    try:
        before = await partitions_of(client, cluster.addresses.values(), TOPIC)
        old = before[partition].leader_id
        assert old >= 0, f"partition {partition} has no leader: {before[partition]}"
        survivors = [a for b, a in cluster.addresses.items() if b != old]
        acked_before = writer.acked_total
        killed_at = time.monotonic()
        await cluster.broker(old).kill()

        async def replaced() -> bool:
            now = (await partitions_of(client, survivors, TOPIC)).get(partition)
            return now is not None and now.leader_id not in (old, -1)

        elected_at = await wait_until(
            replaced, f"a new leader for partition {partition}", timeout_s=WAIT_S
        )
        await until_acked(
            writer, acked_before + PROGRESS_PER_PHASE, f"writes after killing broker {old}"
        )
        restarted_at = time.monotonic()
        await cluster.broker(old).start()
        await wait_fully_replicated(
            client, cluster.addresses.values(), TOPIC, PARTITIONS, timeout_s=WAIT_S
        )
        print(
            f"partition {partition}: broker {old} killed, new leader after "
            f"{elected_at - killed_at:.2f} s, back in the ISR "
            f"{time.monotonic() - restarted_at:.2f} s after its restart"
        )
        return old
    finally:
        await client.close()


async def create_replicated_topic(cluster: ProcessCluster) -> None:
    client = cluster.client()
    try:
        await create_topic(
            client,
            cluster.addresses.values(),
            TOPIC,
            partitions=PARTITIONS,
            replication_factor=3,
            configs={"min.insync.replicas": "2"},
        )
        await wait_fully_replicated(
            client, cluster.addresses.values(), TOPIC, PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await client.close()


@pytest.mark.slow
async def test_kill_9_each_leader_in_turn_loses_no_acknowledged_record(tmp_path: Path) -> None:
    started = time.monotonic()
    async with running_cluster(tmp_path, PROPERTIES) as cluster:
        try:
            await run_failovers_and_check(cluster)
        except BaseException:
            print(cluster.logs())
            raise
    print(f"failover test took {time.monotonic() - started:.1f} s")


async def run_failovers_and_check(cluster: ProcessCluster) -> None:
    await create_replicated_topic(cluster)
    producer = Producer(
        cluster.client(),
        config=ProducerConfig(
            acks=-1,
            linger_ms=2,
            request_timeout_ms=1_000,
            delivery_timeout_ms=60_000,
            retry_backoff_ms=20,
            retry_backoff_max_ms=200,
        ),
        owns_client=True,
    )
    writer = Writer(producer)
    task = asyncio.ensure_future(writer.run())
    killed: list[int] = []
    try:
        await until_acked(writer, PROGRESS_PER_PHASE, "first writes")
        for partition in range(PARTITIONS):
            killed.append(await kill_leader_and_restart(cluster, writer, partition))
        writer.stop.set()
        await asyncio.wait_for(task, WAIT_S)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await producer.close(timeout_ms=1_000)
    context = f"killed={killed} sent={writer.sent} failures={writer.failures[:5]}"
    assert not writer.failures, context
    assert [len(a) for a in writer.acked] == writer.sent, context

    ends = {p: max(writer.acked[p].values()) + 1 for p in range(PARTITIONS)}
    records = await read_partitions(cluster, ends)
    duplicates = check_records(records, writer, ends, context)

    # Clean stop of every node, then the replicas' bytes below the high watermark.
    stopping_at = time.monotonic()
    codes = await cluster.stop()
    print(f"clean stop of every node: {time.monotonic() - stopping_at:.2f} s")
    assert set(codes.values()) == {0}, f"exit codes {codes}: {context}"
    check_replicas_identical(cluster, ends, context)
    print(f"{context} acked={writer.acked_total} duplicates={duplicates} ends={ends}")
    assert duplicates == 0, f"an idempotent producer's retries were written twice: {context}"


def check_records(
    records: list[ConsumerRecord], writer: Writer, ends: dict[int, int], context: str
) -> int:
    """Every acknowledged record where its acknowledgement said, each partition in send order;
    the number of duplicates (records a retry wrote twice)."""
    duplicates = 0
    for partition in range(PARTITIONS):
        mine = [r for r in records if r.partition == partition]
        offsets = [r.offset for r in mine]
        assert offsets[: ends[partition]] == list(range(ends[partition])), (
            f"partition {partition} has gaps: {context}"
        )
        by_offset = {r.offset: r.value for r in mine}
        for seq, offset in writer.acked[partition].items():
            assert by_offset.get(offset) == value_of(partition, seq), (
                f"p{partition} seq {seq} acknowledged at {offset}, found "
                f"{by_offset.get(offset)!r}: {context}"
            )
        seqs = [seq_of(r.value) for r in mine]
        firsts = list(dict.fromkeys(seqs))
        assert firsts == list(range(writer.sent[partition])), (
            f"partition {partition} out of order: {context}"
        )
        duplicates += len(seqs) - len(firsts)
    return duplicates


def check_replicas_identical(cluster: ProcessCluster, ends: dict[int, int], context: str) -> None:
    hws: dict[int, dict[TopicPartition, int]] = {
        b: OffsetCheckpointFile(cluster.broker_dir(b) / REPLICATION_OFFSET_CHECKPOINT).read()
        for b in range(cluster.brokers)
    }
    for partition in range(PARTITIONS):
        tp = TopicPartition(TOPIC, partition)
        # The leader's HW (the largest: a follower learns the HW one fetch later, so a clean
        # stop may leave its checkpoint one round behind). Every replica was back in the ISR
        # before the stop, and an ISR member holds everything below the leader's HW.
        high_watermark = max(hws[b].get(tp, 0) for b in range(cluster.brokers))
        # Otherwise the comparison below would say nothing about the acknowledged records.
        assert high_watermark >= ends[partition], f"{tp}: HWs {hws}: {context}"
        copies = [
            batches_below(cluster.broker_dir(b) / f"{TOPIC}-{partition}", high_watermark)
            for b in range(cluster.brokers)
        ]
        assert copies[0], f"{tp}: no batches: {context}"
        for broker_id, copy in enumerate(copies[1:], start=1):
            assert copy == copies[0], f"{tp}: broker {broker_id} differs from broker 0: {context}"


# -- `ketch controller` ------------------------------------------------------------------------


def cluster_layout(tmp_path: Path) -> Path:
    """`ketch up`'s layout: <dir>/cluster.secret (mode 600) and <dir>/controller/."""
    secret = tmp_path / "cluster.secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    return tmp_path / "controller"


@contextlib.asynccontextmanager
async def controller_process(
    data_dir: Path, log_path: Path, *extra: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    with log_path.open("wb") as log:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cli.main", "controller",
            "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", *extra,
            cwd=REPO, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
        )  # fmt: skip
    try:
        yield child
    finally:
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            await child.wait()


async def test_controller_process_serves_then_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    data_dir = cluster_layout(tmp_path)
    config = tmp_path / "ketch.toml"
    config.write_text(toml_text({"broker.session.timeout.ms": 700, "num.partitions": 2}))
    log_path = tmp_path / "controller.log"
    second_log = tmp_path / "second.log"
    async with controller_process(data_dir, log_path, "--config", str(config)) as child:

        async def serving() -> bool:
            return "listening at 127.0.0.1:" in log_path.read_text()

        await wait_until(serving, "the controller listening", timeout_s=WAIT_S)
        # A second controller on the same metadata directory is refused (the log is locked).
        async with controller_process(data_dir, second_log) as second:
            assert await asyncio.wait_for(second.wait(), WAIT_S) == 1, second_log.read_text()
        child.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(child.wait(), WAIT_S)
    text = log_path.read_text()
    assert code == 0, text
    assert f"cluster secret from {tmp_path / 'cluster.secret'}" in text
    assert "broker_session_timeout_ms': 700" in text
    assert "cannot start" in second_log.read_text()


def test_missing_secret_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "controller"
    assert main(["--data-dir", str(data_dir), "--listen", "127.0.0.1:0"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "no cluster secret" in err
    assert str(tmp_path / "cluster.secret") in err
    assert not data_dir.exists()  # nothing was started


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "broker.session.timeout.ms=0"], "broker.session.timeout.ms=0: must be >= 1"),
        (["--set", "unclean.leader.election.enable=maybe"], "unclean.leader.election.enable"),
        (["--set", "request.timeout.ms=0"], "request.timeout.ms=0: must be >= 1"),
        (["--set", "novalue"], "expected key=value"),
        (["--listen", "nowhere"], "nowhere"),
    ],
)
def test_bad_configuration_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    data_dir = cluster_layout(tmp_path)
    code = main(["--data-dir", str(data_dir), "--listen", "127.0.0.1:0", *extra])
    assert code == EXIT_CONFIG
    assert message in capsys.readouterr().err


def test_settings_read_kafka_names_and_refuse_unknown_ones(tmp_path: Path) -> None:
    data_dir = cluster_layout(tmp_path)
    config = tmp_path / "ketch.toml"
    # One file for the controller and the brokers: a broker's key is no error here.
    properties: dict[str, Value] = {
        "broker.session.timeout.ms": 1_500,
        "min.insync.replicas": 2,
        "request.timeout.ms": 700,
        "max.connections": 9,
    }
    config.write_text(toml_text(properties))
    args = build_parser().parse_args(
        [
            "--data-dir", str(data_dir), "--listen", "127.0.0.1:9093",
            "--config", str(config), "--set", "node.id=7",
        ]
    )  # fmt: skip
    settings = settings_from_args(args)
    assert settings.config.broker_session_timeout_ms == 1_500
    assert settings.config.controller_id == 7
    assert settings.channels.request_timeout_ms == 700
    assert settings.server.max_connections == 9
    assert settings.secret == SECRET
    assert settings.metadata_dir == data_dir
    assert settings.effective.source("node.id") is Source.FLAG
    assert settings.effective.source("min.insync.replicas") is Source.FILE
    config.write_text(toml_text({**properties, "num.partition": 3}))
    with pytest.raises(ConfigError) as refused:
        settings_from_args(args)
    assert str(refused.value) == (
        f'{config}: "num.partition" = 3: unknown property (did you mean "num.partitions"?)'
    )


def test_secret_file_flag_wins_over_the_layout(tmp_path: Path) -> None:
    data_dir = cluster_layout(tmp_path)
    elsewhere = tmp_path / "other.secret"
    elsewhere.write_bytes(b"another-secret-of-enough-length\n")
    elsewhere.chmod(0o600)
    args = build_parser().parse_args(
        [
            "--data-dir", str(data_dir), "--listen", "127.0.0.1:1",
            "--secret-file", str(elsewhere),
        ]
    )  # fmt: skip
    settings = settings_from_args(args)
    assert settings.secret == b"another-secret-of-enough-length"
    assert settings.secret_file == elsewhere


def test_the_ketch_command_passes_node_commands_through(capsys: pytest.CaptureFixture[str]) -> None:
    from cli import main as cli

    assert cli.main(["controller", "--help"]) == 0
    assert "usage: ketch controller" in capsys.readouterr().out
    assert cli.main(["broker", "--id", "0"]) == 2
    assert "ketch broker: error" in capsys.readouterr().err
    # The full command line parses with the `ketch` parser too (for compose files, ...).
    args = cli.build_parser().parse_args(
        ["controller", "--data-dir", "/d", "--listen", "h:1", "--set", "a=b"]
    )
    assert (args.command, args.listen, args.set) == ("controller", "h:1", ["a=b"])


# -- the run loop both processes share (node/process.py) ---------------------------------


@dataclass
class FakeNode:
    fail_start: bool = False
    events: list[str] = field(default_factory=list)

    async def start(self) -> None:
        self.events.append("start")
        if self.fail_start:
            raise OSError("address already in use")

    async def stop(self) -> None:
        self.events.append("stop")


async def test_serve_stops_cleanly_on_sigterm() -> None:
    node = FakeNode()
    serving = asyncio.ensure_future(process.serve(node, name="fake"))
    for _ in range(100):  # bounded: until the node has started and the handlers are in place
        if node.events:
            break
        await asyncio.sleep(0)
    assert node.events == ["start"]
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(serving, WAIT_S) == process.EXIT_OK
    assert node.events == ["start", "stop"]


async def test_serve_exits_1_when_the_node_fails() -> None:
    node = FakeNode()
    failed = asyncio.Event()
    serving = asyncio.ensure_future(process.serve(node, name="fake", failed=failed))
    for _ in range(100):
        if node.events:
            break
        await asyncio.sleep(0)
    failed.set()
    assert await asyncio.wait_for(serving, WAIT_S) == process.EXIT_FAILED
    assert node.events == ["start", "stop"]


async def test_serve_exits_1_when_the_node_cannot_start() -> None:
    node = FakeNode(fail_start=True)
    assert await process.serve(node, name="fake") == process.EXIT_FAILED
    assert node.events == ["start"]
