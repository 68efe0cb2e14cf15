"""`ketch up` as a real process tree on 127.0.0.1: the supervisor (`python -m cli.up.supervisor`),
the
controller and three brokers (`python -m cli.main controller|broker`).

One scenario, in order: ready (cluster.json with each broker's Kafka port, every broker registered,
the layout and the secret's mode); a topic created through a broker; records produced with acks=all
and consumed back; `shutdown-broker` keeps a broker down (clean-shutdown marker, no restart) while
the cluster goes on, `start-broker` brings it back; an unknown id exits 2; SIGINT stops everything
in order with exit 0 and a clean-shutdown marker in every broker dir; with no supervisor the
commands exit 1; a second `ketch up` on the same data dir serves the topic and every record again.

Short timeouts come from the TOML config passed to every node. Waits are bounded polls of a
condition on processes that run on the wall clock; in `finally` every process this test saw is
killed by its PID (the children run in sessions of their own, so each is killed by its group).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from cli.cluster_admin import control_broker
from cli.up.child import Child, ChildState
from cli.up.control import (
    SHUTDOWN_BROKER,
    START_BROKER,
    ControlReply,
    ControlRequest,
    decode_reply,
    decode_request,
)
from cli.up.options import (
    CONTROLLER_PORT_OFFSET,
    KAFKA_OFF,
    UpOptions,
    add_up_arguments,
    child_specs,
    options_from_args,
)
from cli.up.supervisor import main as up_main
from client.client import Client
from client.consumer import Consumer
from client.errors import ClientError
from client.producer import Producer
from node.broker.main import build_parser, settings_from_args
from node.layout import Layout, NodeSpec
from runtime.clock import SystemClock
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from tests.integration.kafka_probe import kafka_api_versions
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
)

REPO: Final = Path(__file__).resolve().parents[2]
BROKERS: Final = 3
TOPIC: Final = "up-events"
WAIT_S: Final = 30.0
KAFKA_OFFSET: Final = (
    400  # the test's --kafka-port is --port + 400 (clear of metrics at +200..+300)
)
CONFIG: Final = """\
"broker.heartbeat.interval.ms" = 100
"broker.session.timeout.ms" = 600
"controlled.shutdown.retry.backoff.ms" = 100
"""


def free_base_port() -> int:
    """A base port with port+0..BROKERS-1, port+100 and the Kafka listeners' port+400..+402
    free right now (a later bind can still race another process; the range is random to make
    that unlikely)."""
    seed = time.time_ns()
    rng = random.Random(seed)
    for _ in range(200):
        base = rng.randrange(20_000, 60_000)
        sockets = []
        kafka = base + KAFKA_OFFSET
        try:
            for port in (
                *range(base, base + BROKERS),
                base + CONTROLLER_PORT_OFFSET,
                *range(kafka, kafka + BROKERS),
            ):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError(f"no free port range found (seed {seed})")


def wait_until(condition: Callable[[], bool], what: str, up: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert up.poll() is None, f"ketch up exited ({up.returncode}) while waiting for {what}"
        assert time.monotonic() < deadline, f"{what} not reached within {WAIT_S} s"
        time.sleep(0.05)


class Cluster:
    """The `ketch up` processes of the test, and every pid they reported."""

    def __init__(self, data_dir: Path, port: int, config: Path, output: Path) -> None:
        self.data_dir = data_dir
        self.port = port
        self.config = config
        self.output = output
        self.up: subprocess.Popen[bytes] | None = None
        self.pids: set[int] = set()

    @property
    def addresses(self) -> list[Address]:
        return [Address("127.0.0.1", self.port + i) for i in range(BROKERS)]

    def start(self) -> dict[str, Any]:
        with self.output.open("ab") as out:
            self.up = subprocess.Popen(
                [
                    sys.executable, "-m", "cli.up.supervisor", "--brokers", str(BROKERS),
                    "--data-dir", str(self.data_dir), "--port", str(self.port),
                    "--kafka-port", str(self.port + KAFKA_OFFSET), "--config", str(self.config),
                ],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        cluster_json = self.data_dir / "cluster.json"
        wait_until(cluster_json.exists, "cluster.json", self.up)
        return self.read_cluster()

    @property
    def up_process(self) -> subprocess.Popen[bytes]:
        assert self.up is not None
        return self.up

    def read_cluster(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads((self.data_dir / "cluster.json").read_text())
        nodes = [document["controller"], *document["brokers"]]
        self.pids |= {node["pid"] for node in nodes if node["pid"] is not None}
        return document

    def interrupt(self) -> int:
        assert self.up is not None
        self.up.send_signal(signal.SIGINT)
        return self.up.wait(WAIT_S)

    def log(self) -> str:
        return self.output.read_text(errors="replace")

    def kill_all(self) -> None:
        if self.up is not None and self.up.poll() is None:
            self.up.kill()
            self.up.wait()
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    config = tmp_path / "ketch.toml"
    config.write_text(CONFIG)
    # Short: the control socket's path must fit in sun_path (108 bytes).
    data_dir = tmp_path / "d"
    running = Cluster(data_dir, free_base_port(), config, tmp_path / "up.out")
    try:
        yield running
    finally:
        running.kill_all()


async def create_topic(addresses: list[Address]) -> None:
    async with Client(addresses, transport=TcpTransport(), clock=SystemClock()) as client:
        request = CreateTopicsRequest(
            topics=[CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=BROKERS)]
        )
        response = await client.send(addresses[0], request)
        assert isinstance(response, CreateTopicsResponse), response
        assert response.topics[0].error_code == ErrorCode.NONE, response
        await client.wait_for_topic(TOPIC, timeout_ms=WAIT_S * 1000)


async def wait_serving(address: Address, broker_id: int) -> None:
    """Until the broker at `address` answers and the controller lists it as running."""
    deadline = time.monotonic() + WAIT_S
    async with Client([address], transport=TcpTransport(), clock=SystemClock()) as client:
        while True:
            with contextlib.suppress(ClientError):
                response = await client.send(address, DescribeClusterRequest())
                assert isinstance(response, DescribeClusterResponse), response
                states = {b.broker_id: b.state for b in response.brokers}
                if states.get(broker_id) == "running":
                    return
            assert time.monotonic() < deadline, f"broker {broker_id} not serving in {WAIT_S} s"
            await asyncio.sleep(0.05)


async def produce(addresses: list[Address], values: list[bytes]) -> None:
    client = Client(addresses, transport=TcpTransport(), clock=SystemClock())
    async with Producer(client, owns_client=True) as producer:  # acks=all is the default
        assert producer.config.acks == -1
        futures = [await producer.send(TOPIC, None, value, partition=0) for value in values]
        await producer.flush()
        for future in futures:
            metadata = await future
            assert metadata.offset >= 0


async def consume(addresses: list[Address], count: int) -> list[bytes]:
    client = Client(addresses, transport=TcpTransport(), clock=SystemClock())
    async with Consumer(client, owns_client=True) as consumer:
        consumer.assign([(TOPIC, 0)])
        consumer.seek_to_beginning((TOPIC, 0))
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < count and time.monotonic() < deadline:
            for record in await consumer.poll(timeout_ms=500):
                assert record.value is not None
                values.append(record.value)
        return values


def test_up_serves_stops_one_broker_and_recovers_after_restart(cluster: Cluster) -> None:
    document = cluster.start()
    data_dir = cluster.data_dir
    assert document["controller"]["port"] == cluster.port + CONTROLLER_PORT_OFFSET
    assert [b["id"] for b in document["brokers"]] == list(range(BROKERS))
    for broker in document["brokers"]:
        assert broker["port"] == cluster.port + broker["id"]
        assert broker["kafka_port"] == cluster.port + KAFKA_OFFSET + broker["id"]
        assert broker["pid"] is not None
        assert broker["data_dir"] == str(data_dir / f"broker-{broker['id']}")
    assert stat.S_IMODE((data_dir / "cluster.secret").stat().st_mode) == 0o600
    assert (data_dir / "controller").is_dir()
    for node in ("controller", *(f"broker-{i}" for i in range(BROKERS))):
        assert (data_dir / "logs" / f"{node}.log").exists(), node
    assert "ready" in cluster.log()
    assert f"Kafka clients 127.0.0.1:{cluster.port + KAFKA_OFFSET}" in cluster.log()
    for broker in document["brokers"]:  # each broker speaks Kafka on its kafka_port
        kafka = Address("127.0.0.1", broker["kafka_port"])
        assert asyncio.run(kafka_api_versions(kafka, correlation_id=3)) == (3, ErrorCode.NONE)
    # A second supervisor for the same data dir refuses to start.
    second_up = [
        "--data-dir", str(data_dir), "--port", str(cluster.port), "--config", str(cluster.config),
    ]  # fmt: skip
    assert up_main(second_up) == 1

    first = [f"record-{i}".encode() for i in range(20)]
    asyncio.run(create_topic(cluster.addresses))
    asyncio.run(produce(cluster.addresses, first))
    assert asyncio.run(consume(cluster.addresses, len(first))) == first, cluster.log()

    # A broker that dies is reported and restarted.
    killed_pid = document["brokers"][0]["pid"]
    os.kill(killed_pid, signal.SIGKILL)
    wait_until(
        lambda: cluster.read_cluster()["brokers"][0]["pid"] not in (None, killed_pid),
        "broker 0 restarted",
        cluster.up_process,
    )
    asyncio.run(wait_serving(cluster.addresses[0], 0))
    assert "broker-0 exited (killed by SIGKILL)" in cluster.log()

    # shutdown-broker: a controlled shutdown; the broker stays down, the others go on.
    old_pid = document["brokers"][2]["pid"]
    assert control_broker(SHUTDOWN_BROKER, 2, data_dir) == 0, cluster.log()
    assert (data_dir / "broker-2" / CLEAN_SHUTDOWN_FILE).exists()
    assert cluster.read_cluster()["brokers"][2]["pid"] is None
    with pytest.raises(ProcessLookupError):
        os.kill(old_pid, 0)
    second = [f"while-down-{i}".encode() for i in range(5)]
    asyncio.run(produce(cluster.addresses[:2], second))
    assert control_broker(SHUTDOWN_BROKER, 2, data_dir) == 0  # already stopped: nothing to do
    assert control_broker(SHUTDOWN_BROKER, 7, data_dir) == 2
    assert cluster.read_cluster()["brokers"][2]["pid"] is None  # not restarted meanwhile

    assert control_broker(START_BROKER, 2, data_dir) == 0, cluster.log()
    new_pid = cluster.read_cluster()["brokers"][2]["pid"]
    assert new_pid is not None
    assert new_pid != old_pid
    assert control_broker(START_BROKER, 7, data_dir) == 2

    # Ctrl-C: every broker stops cleanly, then the controller; exit 0.
    code = cluster.interrupt()
    assert code == 0, cluster.log()
    for i in range(BROKERS):
        assert (data_dir / f"broker-{i}" / CLEAN_SHUTDOWN_FILE).exists(), (i, cluster.log())
    assert not (data_dir / "up.sock").exists()
    assert not (data_dir / "cluster.json").exists()
    for pid in cluster.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert control_broker(START_BROKER, 2, data_dir) == 1  # no cluster running

    # The same data dir again: the topic and every record are there.
    secret = (data_dir / "cluster.secret").read_bytes()
    cluster.start()
    assert (data_dir / "cluster.secret").read_bytes() == secret  # created once
    expected = first + second
    assert asyncio.run(consume(cluster.addresses, len(expected))) == expected, cluster.log()
    assert cluster.interrupt() == 0, cluster.log()


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert up_main(["--brokers", "0", "--data-dir", str(tmp_path)]) == 2
    assert "--brokers must be at least 1" in capsys.readouterr().err
    assert up_main(["--config", str(tmp_path / "missing.toml"), "--data-dir", str(tmp_path)]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert up_main(["--port", "65500", "--data-dir", str(tmp_path)]) == 2
    assert "--port out of range" in capsys.readouterr().err
    assert up_main(["--port", "65300", "--data-dir", str(tmp_path)]) == 2  # metrics at +300
    assert "--port out of range" in capsys.readouterr().err
    assert up_main(["--kafka-port", "0", "--data-dir", str(tmp_path)]) == 2
    assert "--kafka-port out of range: 0 (-1 runs without Kafka listeners)" in (
        capsys.readouterr().err
    )
    assert up_main(["--kafka-port", "65535", "--data-dir", str(tmp_path)]) == 2  # 3 brokers
    assert "--kafka-port out of range" in capsys.readouterr().err
    assert up_main(["--kafka-port", "9094", "--data-dir", str(tmp_path)]) == 2
    assert "broker 0's Kafka listener and broker 2 would both bind port 9094" in (
        capsys.readouterr().err
    )
    assert up_main(["--kafka-port", "9390", "--data-dir", str(tmp_path)]) == 2
    assert "the controller's metrics and broker 2's Kafka listener would both bind port 9392" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "cluster.secret").exists()  # nothing was created


def test_admin_commands_without_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    assert main(["cluster", "shutdown-broker", "1", "--data-dir", str(tmp_path)]) == 1
    assert f"no `ketch up` cluster is running at {tmp_path}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["cluster", "start-broker", "x"])
    assert usage.value.code == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json\n", "malformed request"),
        (b"[1, 2]\n", "malformed request"),
        (b'{"command": "reboot", "broker": 1}\n', "unknown command 'reboot'"),
        (b'{"command": "start-broker"}\n', "start-broker needs a broker id"),
        (b'{"command": "shutdown-broker", "broker": true}\n', "must be an integer"),
        (b'{"command": "shutdown-broker", "broker": "1"}\n', "must be an integer"),
    ],
)
def test_bad_control_requests_are_usage_errors(line: bytes, message: str) -> None:
    reply = decode_request(line)
    assert isinstance(reply, ControlReply)
    assert not reply.ok
    assert reply.exit_code == 2
    assert message in reply.message


def test_control_messages_round_trip() -> None:
    request = ControlRequest(SHUTDOWN_BROKER, 4)
    assert decode_request(request.encode()) == request
    reply = ControlReply(False, 2, "unknown broker id 4")
    assert decode_reply(reply.encode()) == reply


def test_a_child_rejects_an_illegal_state_change() -> None:
    spec = NodeSpec("broker-0", 0, Address("127.0.0.1", 9092), ("broker",), Path("x.log"))
    child = Child(spec)
    with pytest.raises(AssertionError):
        child.move(ChildState.STOPPING)  # nothing runs, so nothing can be stopping
    child.move(ChildState.RUNNING)
    child.move(ChildState.BACKOFF)
    with pytest.raises(AssertionError):
        child.move(ChildState.STOPPING)  # a stop during the backoff goes straight to DOWN
    child.move(ChildState.DOWN)


def broker_options(kafka_port: int) -> UpOptions:
    return UpOptions(BROKERS, Path("/d"), 9092, kafka_port, None)


def test_brokers_get_kafka_listeners_at_kafka_port_plus_id() -> None:
    layout = Layout(Path("/d"))
    _, brokers = child_specs(broker_options(19092), layout)
    for broker_id, spec in enumerate(brokers):
        assert spec.kafka_address == Address("127.0.0.1", 19092 + broker_id)
        flag = spec.argv.index("--kafka-listen")
        assert spec.argv[flag + 1] == f"127.0.0.1:{19092 + broker_id}"
        assert spec.argv[spec.argv.index("--listen") + 1] == f"127.0.0.1:{9092 + broker_id}"
    controller, brokers = child_specs(broker_options(KAFKA_OFF), layout)
    assert "--kafka-listen" not in controller.argv
    for spec in brokers:
        assert spec.kafka_address is None
        assert "--kafka-listen" not in spec.argv


def test_broker_command_lines_parse_with_the_broker_parser(tmp_path: Path) -> None:
    """What `ketch up` runs is what `ketch broker` accepts: the Kafka listener included."""
    layout = Layout(tmp_path)
    layout.prepare(range(BROKERS))
    _, brokers = child_specs(broker_options(19092), layout)
    for broker_id, spec in enumerate(brokers):
        assert spec.args[0] == "broker"
        config = settings_from_args(build_parser().parse_args(spec.args[1:])).config
        assert config.kafka_listen_address == Address("127.0.0.1", 19092 + broker_id)
        assert config.listen_address == Address("127.0.0.1", 9092 + broker_id)


def test_a_small_cluster_lowers_the_internal_topics_replication(tmp_path: Path) -> None:
    """One broker cannot hold Kafka's three replicas of __consumer_offsets: `ketch up --brokers
    1` passes factors of 1 to every node, unless the config file chose its own."""
    layout = Layout(tmp_path)
    parser = argparse.ArgumentParser()
    add_up_arguments(parser)
    alone = options_from_args(parser.parse_args(["--brokers", "1", "--data-dir", str(tmp_path)]))
    assert isinstance(alone, UpOptions)
    controller, [broker] = child_specs(alone, layout)
    for spec in (controller, broker):
        assert "offsets.topic.replication.factor=1" in spec.argv
        assert "transaction.state.log.replication.factor=1" in spec.argv
        assert "transaction.state.log.min.isr=1" in spec.argv

    config = tmp_path / "ketch.toml"
    config.write_text('"offsets.topic.replication.factor" = 1\n"num.partitions" = 2\n')
    chosen = options_from_args(
        parser.parse_args(["--brokers", "2", "--config", str(config), "--data-dir", str(tmp_path)])
    )
    assert isinstance(chosen, UpOptions)
    _, brokers = child_specs(chosen, layout)
    for spec in brokers:
        assert not any(arg.startswith("offsets.topic.replication.factor=") for arg in spec.argv)
        assert "transaction.state.log.replication.factor=2" in spec.argv

    _, brokers = child_specs(broker_options(19092), layout)  # three brokers: Kafka's defaults
    assert not any("replication.factor" in arg for spec in brokers for arg in spec.argv)

    config.write_text("not = [toml")
    refused = options_from_args(parser.parse_args(["--config", str(config)]))
    assert isinstance(refused, str)
    assert "not valid TOML" in refused
