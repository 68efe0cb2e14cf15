"""`ketch broker` as a real process (`python -m node.broker.main`) on 127.0.0.1, against a
fake controller served by the test process: it registers, heartbeats, serves, and on SIGTERM
runs the controlled shutdown and a clean stop (exit 0, clean-shutdown marker).

Waits are bounded polls of a condition (a process runs on the wall clock); the child is killed
by its PID in a `finally` whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from client.client import Client
from node.broker.config import KAFKA_LISTENER, NATIVE_LISTENER
from node.broker.main import BrokerSettings, build_parser, main, settings_from_args
from node.process import EXIT_CONFIG
from runtime.clock import SystemClock
from runtime.config import ConfigError, Source
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from runtime.net.dialect import RequestContext
from runtime.net.server import Server
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.kafka_probe import kafka_api_versions
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    MetadataRequest,
    MetadataResponse,
)

SECRET: Final = b"broker-main-test-secret-0123456789"
REPO: Final = Path(__file__).resolve().parents[2]
EPOCH: Final = 7
WAIT_S: Final = 30.0


@dataclass
class FakeController:
    registrations: list[BrokerRegistrationRequest] = field(default_factory=list)
    heartbeats: list[int] = field(default_factory=list)
    shutdowns: list[int] = field(default_factory=list)
    server: Server | None = None

    async def start(self) -> Address:
        self.server = Server(
            TcpTransport(),
            Address("127.0.0.1", 0),
            {
                ApiKey.BROKER_REGISTRATION: self._register,
                ApiKey.BROKER_HEARTBEAT: self._heartbeat,
                ApiKey.CONTROLLED_SHUTDOWN: self._controlled_shutdown,
            },
            clock=SystemClock(),
            cluster_secret=SECRET,
        )
        await self.server.start()
        return self.server.address

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()

    async def _register(
        self, request: BrokerRegistrationRequest, ctx: RequestContext
    ) -> BrokerRegistrationResponse:
        self.registrations.append(request)
        return BrokerRegistrationResponse(broker_epoch=EPOCH)

    async def _heartbeat(
        self, request: BrokerHeartbeatRequest, ctx: RequestContext
    ) -> BrokerHeartbeatResponse:
        self.heartbeats.append(request.broker_epoch)
        return BrokerHeartbeatResponse(is_fenced=False)

    async def _controlled_shutdown(
        self, request: ControlledShutdownRequest, ctx: RequestContext
    ) -> ControlledShutdownResponse:
        self.shutdowns.append(request.broker_epoch)
        return ControlledShutdownResponse()


@pytest.fixture
async def controller() -> AsyncIterator[tuple[FakeController, Address]]:
    fake = FakeController()
    address = await fake.start()
    try:
        yield fake, address
    finally:
        await fake.stop()


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached within {WAIT_S} s")
        await asyncio.sleep(0.02)


def cluster_layout(tmp_path: Path) -> Path:
    """`ketch up`'s layout: <dir>/cluster.secret (mode 600) and <dir>/broker-0/."""
    secret = tmp_path / "cluster.secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    data_dir = tmp_path / "broker-0"
    data_dir.mkdir()
    return data_dir


async def test_broker_process_registers_serves_and_stops_cleanly_on_sigterm(
    tmp_path: Path, controller: tuple[FakeController, Address]
) -> None:
    fake, address = controller
    data_dir = cluster_layout(tmp_path)
    config = tmp_path / "ketch.toml"
    config.write_text('"broker.heartbeat.interval.ms" = 5000\n"min.insync.replicas" = 1\n')
    stderr_path = tmp_path / "broker.log"
    with stderr_path.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "node.broker.main",
            "--id",
            "0",
            "--data-dir",
            str(data_dir),
            "--listen",
            "127.0.0.1:0",
            "--kafka-listen",
            "127.0.0.1:0",
            "--controller",
            str(address),
            "--config",
            str(config),
            "--set",
            "broker.heartbeat.interval.ms=50",  # the flag wins over the file
            cwd=REPO,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        await wait_for(lambda: len(fake.heartbeats) >= 3, "registration and three heartbeats")
        assert fake.heartbeats[:3] == [EPOCH] * 3
        [registration] = fake.registrations
        assert registration.broker_id == 0
        listeners = {listener.name: listener for listener in registration.listeners}
        assert set(listeners) == {"native", "kafka"}
        listener = listeners["native"]
        assert listener.host == "127.0.0.1"
        assert listener.port > 0
        # The Kafka listener registers where it really bound (port 0 resolved) and speaks Kafka.
        kafka = Address(listeners["kafka"].host, listeners["kafka"].port)
        assert kafka.host == "127.0.0.1"
        assert kafka.port not in (0, listener.port)
        assert await kafka_api_versions(kafka, correlation_id=41) == (41, ErrorCode.NONE)

        client = Client(
            [Address(listener.host, listener.port)], transport=TcpTransport(), clock=SystemClock()
        )
        try:
            response = await client.send(
                Address(listener.host, listener.port), MetadataRequest(topics=[])
            )
        finally:
            await client.close()
        assert isinstance(response, MetadataResponse)
        assert response.error is ErrorCode.NONE

        process.send_signal(signal.SIGTERM)
        returncode = await asyncio.wait_for(process.wait(), WAIT_S)
        log_text = stderr_path.read_text()
        assert returncode == 0, log_text
        assert fake.shutdowns == [EPOCH], log_text
        assert (data_dir / CLEAN_SHUTDOWN_FILE).exists(), log_text
        assert "stopped cleanly" in log_text
        assert f"cluster secret from {tmp_path / 'cluster.secret'}" in log_text
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            await process.wait()


def test_missing_secret_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "broker-0"
    code = main(
        [
            "--id", "0", "--data-dir", str(data_dir),
            "--listen", "127.0.0.1:0", "--controller", "127.0.0.1:1",
        ]
    )  # fmt: skip
    assert code == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "no cluster secret" in err
    assert str(tmp_path / "cluster.secret") in err
    assert not data_dir.exists()  # nothing was started


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "controlled.shutdown.enable=maybe"], "controlled.shutdown.enable"),
        (["--set", "novalue"], "expected key=value"),
        (["--config", "missing.toml"], "config file not found"),
        (["--secret-file", "short.secret"], "shorter than 16 bytes"),
    ],
)
def test_bad_configuration_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    data_dir = cluster_layout(tmp_path)
    (tmp_path / "short.secret").write_bytes(b"too short")
    extra = [str(tmp_path / a) if a.endswith((".toml", ".secret")) else a for a in extra]
    code = main(
        [
            "--id", "0", "--data-dir", str(data_dir),
            "--listen", "127.0.0.1:0", "--controller", "127.0.0.1:1", *extra,
        ]
    )  # fmt: skip
    assert code == EXIT_CONFIG
    assert message in capsys.readouterr().err


def test_the_controllers_names_are_known_and_a_name_no_node_reads_is_refused(
    tmp_path: Path,
) -> None:
    data_dir = cluster_layout(tmp_path)
    config = tmp_path / "ketch.toml"
    # One file for the controller and the brokers: the controller's keys are no error here.
    config.write_text('"metadata.snapshot.records" = 3\n"replica.lag.time.max.ms" = 10000\n')
    argv = [
        "--id", "0", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0",
        "--controller", "127.0.0.1:1", "--config", str(config),
    ]  # fmt: skip
    settings = settings_from_args(build_parser().parse_args(argv))
    assert settings.effective.source("metadata.snapshot.records") is Source.FILE
    assert settings.config.replica_manager.replica_lag_time_max_ms == 10_000
    assert settings.config.log.log_dirs == (str(data_dir),)
    assert settings.secret == SECRET
    config.write_text('"metadata.snapshot.records" = 3\n"replica.lag.time.max" = 10\n')
    with pytest.raises(ConfigError) as refused:
        settings_from_args(build_parser().parse_args(argv))
    assert str(refused.value) == (
        f'{config}: "replica.lag.time.max" = 10: unknown property '
        '(did you mean "replica.lag.time.max.ms"?)'
    )


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--id", "0"]) == 2
    assert "required" in capsys.readouterr().err


def settings(tmp_path: Path, *extra: str, config: str | None = None) -> BrokerSettings:
    """`ketch broker`'s settings for broker 0 in `ketch up`'s layout, with `extra` flags."""
    data_dir = tmp_path / "broker-0"
    if not data_dir.exists():
        data_dir = cluster_layout(tmp_path)
    argv = ["--id", "0", "--data-dir", str(data_dir), "--controller", "127.0.0.1:1", *extra]
    if config is not None:
        (tmp_path / "ketch.toml").write_text(config)
        argv += ["--config", str(tmp_path / "ketch.toml")]
    return settings_from_args(build_parser().parse_args(argv))


def test_kafka_listen_adds_the_kafka_listener(tmp_path: Path) -> None:
    config = settings(
        tmp_path, "--listen", "127.0.0.1:9092", "--kafka-listen", "127.0.0.1:19092"
    ).config
    assert config.listen_address == Address("127.0.0.1", 9092)
    assert config.kafka_listen_address == Address("127.0.0.1", 19092)
    assert config.advertised_listeners == {}
    plain = settings(tmp_path, "--listen", "127.0.0.1:9092")
    assert plain.config.kafka_listen_address is None
    assert plain.effective.settings["listeners"].value == "native://127.0.0.1:9092"
    assert plain.effective.source("listeners") is Source.FLAG


def test_listener_flags_replace_only_their_own_entry(tmp_path: Path) -> None:
    file = '"listeners" = "native://10.0.0.1:1,kafka://0.0.0.0:2"\n'
    file += '"advertised.listeners" = "kafka://kafka.example:2"\n'
    from_file = settings(tmp_path, "--listen", "127.0.0.1:9092", config=file)
    # --listen beats the file's native entry; the file's kafka entry stays, advertised.
    assert dict(from_file.config.listeners) == {
        NATIVE_LISTENER: Address("127.0.0.1", 9092),
        KAFKA_LISTENER: Address("0.0.0.0", 2),
    }
    assert from_file.config.advertised(KAFKA_LISTENER, Address("0.0.0.0", 2)) == Address(
        "kafka.example", 2
    )
    assert from_file.effective.settings["listeners"].value == (
        "native://127.0.0.1:9092,kafka://0.0.0.0:2"
    )
    # --kafka-listen beats the file's kafka entry, and `--set` beats the file.
    flagged = settings(
        tmp_path,
        "--listen", "127.0.0.1:9092", "--kafka-listen", "127.0.0.1:19092",
        "--set", "advertised.listeners=native://broker.example:9092",
        config=file,
    )  # fmt: skip
    assert flagged.config.kafka_listen_address == Address("127.0.0.1", 19092)
    assert flagged.config.advertised_listeners == {NATIVE_LISTENER: Address("broker.example", 9092)}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--kafka-listen", "nowhere"], "not a host:port address"),
        (["--kafka-listen", "127.0.0.1:9092"], "native and kafka both use port 9092"),
        (["--kafka-listen", "0.0.0.0:19092"], "kafka binds the wildcard host 0.0.0.0"),
        (["--set", "advertised.listeners=kafka://h:1"], "kafka is not in listeners"),
        (["--set", "listeners=native://h:1,native://h:2"], "native named twice"),
    ],
)
def test_bad_listener_flags_are_configuration_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    data_dir = cluster_layout(tmp_path)
    argv = ["--id", "0", "--data-dir", str(data_dir), "--controller", "127.0.0.1:1"]
    assert main([*argv, "--listen", "127.0.0.1:9092", *extra]) == EXIT_CONFIG
    assert message in capsys.readouterr().err


def test_process_cluster_gives_each_broker_a_kafka_listener(tmp_path: Path) -> None:
    """testkit.processes.ProcessCluster(kafka=True): distinct free ports, and broker command lines
    `ketch broker` accepts with the Kafka listener at the advertised bootstrap addresses."""
    cluster = ProcessCluster(tmp_path / "c", 3, {"min.insync.replicas": 2}, kafka=True)
    ports = [cluster.controller_address.port]
    ports += [a.port for a in cluster.addresses.values()]
    ports += [a.port for a in cluster.kafka_addresses.values()]
    assert len(set(ports)) == len(ports) == 7
    assert cluster.kafka_bootstrap() == ",".join(
        f"127.0.0.1:{cluster.kafka_addresses[b].port}" for b in range(3)
    )
    assert cluster.kafka_bootstrap([2]) == f"127.0.0.1:{cluster.kafka_addresses[2].port}"
    for broker_id in range(3):
        args = cluster.broker(broker_id).spec.args
        assert args[0] == "broker"
        config = settings_from_args(build_parser().parse_args(args[1:])).config
        assert config.kafka_listen_address == cluster.kafka_addresses[broker_id]
        assert config.listen_address == cluster.addresses[broker_id]
    # Without the option (every existing caller) nothing changes.
    plain = ProcessCluster(tmp_path / "p", 2)
    assert plain.kafka_addresses == {}
    assert all("--kafka-listen" not in child.spec.args for child in plain.children.values())
    with pytest.raises(AssertionError):
        plain.kafka_bootstrap()


async def test_process_cluster_brokers_serve_kafka_at_their_kafka_addresses(
    tmp_path: Path,
) -> None:
    async with running_cluster(
        tmp_path, {"broker.heartbeat.interval.ms": 100}, brokers=1, kafka=True
    ) as cluster:
        [address] = cluster.kafka_addresses.values()
        assert cluster.kafka_bootstrap() == str(address)
        assert await kafka_api_versions(address, correlation_id=7) == (7, ErrorCode.NONE)
        codes = await cluster.stop()
        assert codes == {"broker-0": 0, "controller": 0}, cluster.logs()
