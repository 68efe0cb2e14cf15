"""The client commands (`ketch topic`, `produce`, `consume`, `cluster status`, `config show`)
against a real cluster: testkit.cluster.tcp_cluster (a controller and three brokers over TCP on
127.0.0.1, system clock) runs on its own event loop in a background thread, and each command is
called as `main(argv)` of its module, as the `ketch` entry point would, with stdout, stderr and
stdin captured.

(Long, on purpose: one module, one shared cluster.) The cluster is shared by the module
(starting it is the slow part); every test uses its own topic names, so the tests do not depend
on each other's order. Waits are bounded: the cluster start by a threading.Event with a timeout,
the commands by their own timeouts.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import io
import json
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from cli import common as cli_common
from cli import data as cli_data
from cli import group as cli_group
from cli import status as cli_status
from cli import topic as cli_topic
from cli.common import SubParsers
from client.client import Client
from client.config import ConsumerConfig
from client.consumer import Consumer
from runtime.clock import SystemClock
from runtime.config import Source
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from testkit.cluster import tcp_cluster
from wire.topic import TopicPartition

BROKERS: Final = 3
REPO: Final = Path(__file__).resolve().parents[2]
CHILD_WAIT_S: Final = 20.0
START_TIMEOUT_S: Final = 30.0
DESCRIBE_KEYS: Final = {"topic", "topic_id", "partitions"}
PARTITION_KEYS: Final = {
    "partition",
    "leader",
    "leader_epoch",
    "offline_replicas",
    "isr",
    "replicas",
    "high_watermark",
}
# The cluster's stop runs each broker's controlled shutdown; the last broker standing cannot hand
# its leaderships to anyone and retries, by default 5 s apart.
FAST_STOP: Final = {"controlled.shutdown.retry.backoff.ms": 50}


class ClusterThread:
    """A BenchCluster on its own event loop in a daemon thread, until `stop()`."""

    def __init__(self) -> None:
        self.addresses: list[Address] = []
        self.controller_address: Address | None = None
        self.controller_id = -1
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="cli test cluster", daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(START_TIMEOUT_S), "the test cluster did not start in time"
        if self._error is not None:
            raise RuntimeError("the test cluster failed to start") from self._error

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(START_TIMEOUT_S)
        assert not self._thread.is_alive(), "the test cluster did not stop in time"
        if self._error is not None:
            raise RuntimeError("the test cluster failed") from self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start() / stop() on the test's thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with tcp_cluster(
            BROKERS, transport=TcpTransport(), clock=SystemClock(), properties=FAST_STOP
        ) as cluster:
            self.addresses = cluster.addresses
            self.controller_address = cluster.controller.address
            self.controller_id = cluster.controller.actor.config.controller_id
            self._ready.set()
            await self._stop.wait()

    @property
    def bootstrap(self) -> str:
        return str(self.addresses[0])


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterThread]:
    running = ClusterThread()
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def unreachable() -> str:
    """An address nothing listens on: a port the OS handed out and that was closed again."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"127.0.0.1:{port}"


def feed_stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def create(cluster: ClusterThread, name: str, partitions: int, rf: int, *extra: str) -> None:
    argv = ["topic", "create", name, "--partitions", str(partitions)]
    argv += ["--replication-factor", str(rf), "--bootstrap", cluster.bootstrap, *extra]
    assert cli_topic.main(argv) == 0


def describe_json(
    cluster: ClusterThread, name: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, object]:
    capsys.readouterr()
    argv = ["topic", "describe", name, "--json", "--bootstrap", cluster.bootstrap]
    assert cli_topic.main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert isinstance(document, dict)
    return document


def consume(
    cluster: ClusterThread, capsys: pytest.CaptureFixture[str], topic: str, *flags: str
) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = cli_data.main(["consume", topic, "--bootstrap", cluster.bootstrap, *flags])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


# ---------------------------------------------------------------------------------------------
# topic create / list / describe


def test_topic_create_list_describe_json_shape(
    cluster: ClusterThread, capsys: pytest.CaptureFixture[str]
) -> None:
    create(cluster, "orders", 3, 2, "--config", "retention.ms=600000")
    assert "Created topic 'orders'" in capsys.readouterr().out

    assert cli_topic.main(["topic", "list", "--json", "--bootstrap", cluster.bootstrap]) == 0
    listed = json.loads(capsys.readouterr().out)
    (orders,) = [t for t in listed["topics"] if t["topic"] == "orders"]
    assert orders["partitions"] == 3
    assert orders["replication_factor"] == 2
    assert isinstance(orders["topic_id"], str)

    assert cli_topic.main(["topic", "list", "--bootstrap", cluster.bootstrap]) == 0
    assert "orders" in capsys.readouterr().out

    described = describe_json(cluster, "orders", capsys)
    assert set(described) == DESCRIBE_KEYS
    assert described["topic"] == "orders"
    assert described["topic_id"] == orders["topic_id"]
    partitions = described["partitions"]
    assert isinstance(partitions, list)
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert set(p) == PARTITION_KEYS, p
        assert len(p["replicas"]) == 2, p
        assert p["leader"] in p["replicas"], p
        assert set(p["isr"]) <= set(p["replicas"]), p
        assert p["leader_epoch"] >= 0, p
        assert p["high_watermark"] == 0, p  # nothing written yet, but known

    assert cli_topic.main(["topic", "describe", "orders", "--bootstrap", cluster.bootstrap]) == 0
    table = capsys.readouterr().out
    assert "High watermark" in table
    assert "orders" in table


def test_topic_create_refusals_exit_1(
    cluster: ClusterThread, capsys: pytest.CaptureFixture[str]
) -> None:
    create(cluster, "twice", 1, 1)
    capsys.readouterr()
    argv = ["topic", "create", "twice", "--partitions", "1", "--replication-factor", "1"]
    assert cli_topic.main([*argv, "--bootstrap", cluster.bootstrap]) == 1
    assert "TOPIC_ALREADY_EXISTS" in capsys.readouterr().err

    too_many = ["topic", "create", "wide", "--partitions", "1", "--replication-factor", "9"]
    assert cli_topic.main([*too_many, "--bootstrap", cluster.bootstrap]) == 1
    assert "INVALID_REPLICATION_FACTOR" in capsys.readouterr().err

    bad_config = [*argv[:2], "badconf", *argv[3:], "--config", "no.such.config=1"]
    assert cli_topic.main([*bad_config, "--bootstrap", cluster.bootstrap]) == 1
    assert "INVALID_CONFIG" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# produce / consume


def test_produce_with_keys_then_consume_with_offsets(
    cluster: ClusterThread, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    create(cluster, "keyed", 3, 3)
    lines = [f"user-{i % 5}:event-{i}" for i in range(30)]
    feed_stdin(monkeypatch, "".join(f"{line}\n" for line in lines))
    capsys.readouterr()
    argv = ["produce", "keyed", "--key-separator", ":", "--bootstrap", cluster.bootstrap]
    assert cli_data.main(argv) == 0
    assert "30 of 30 record(s) acknowledged (acks=all)" in capsys.readouterr().err

    code, out, err = consume(
        cluster, capsys, "keyed", "--from-beginning", "--print-offsets", "--timeout-ms", "1000"
    )
    assert code == 0, err
    assert "Processed a total of 30 message(s)" in err
    rows = [line.split("\t") for line in out]
    assert sorted(value for _, _, value in rows) == sorted(line.split(":")[1] for line in lines)
    by_partition: dict[int, list[int]] = {}
    partition_of_key: dict[str, set[int]] = {}
    for partition, offset, value in rows:
        by_partition.setdefault(int(partition), []).append(int(offset))
        key = f"user-{int(value.removeprefix('event-')) % 5}"
        partition_of_key.setdefault(key, set()).add(int(partition))
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets))), by_partition
    # The key decides the partition: each key's records all sit in one partition.
    assert all(len(parts) == 1 for parts in partition_of_key.values()), partition_of_key

    # The keys themselves were stored (the console output shows values only).
    stored = asyncio.run(_stored(cluster, "keyed", 3))
    assert sorted(k for k, _ in stored if k is not None) == sorted(
        line.split(":")[0].encode() for line in lines
    )

    # describe: the high watermarks add up to what was acknowledged with acks=all.
    described = describe_json(cluster, "keyed", capsys)
    partitions = described["partitions"]
    assert isinstance(partitions, list)
    assert sum(p["high_watermark"] for p in partitions) == 30
    for p in partitions:
        assert p["high_watermark"] == len(by_partition.get(p["partition"], [])), p


async def _stored(
    cluster: ClusterThread, topic: str, partitions: int
) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record of `topic`, read with the library's Consumer."""
    client = Client(cluster.addresses, transport=TcpTransport(), clock=SystemClock())
    consumer = Consumer(
        client, config=ConsumerConfig(auto_offset_reset="earliest"), owns_client=True
    )
    found: list[tuple[bytes | None, bytes | None]] = []
    try:
        consumer.assign(TopicPartition(topic, p) for p in range(partitions))
        for _ in range(50):  # bounded: every poll returns records or 200 ms passed
            records = await consumer.poll(timeout_ms=200)
            if not records:
                break
            found += [(r.key, r.value) for r in records]
    finally:
        await consumer.close()
    return found


def test_produce_sends_bytes_as_given(
    cluster: ClusterThread, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """stdin's bytes go out unchanged (no decoding), CRLF line ends are not part of values, and
    the consumer prints undecodable bytes as replacement characters instead of failing."""
    create(cluster, "binary", 1, 1)
    raw = b"k\xff|v\xfe\x00\r\nplain|text\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    argv = ["produce", "binary", "--key-separator", "|", "--bootstrap", cluster.bootstrap]
    assert cli_data.main(argv) == 0
    stored = asyncio.run(_stored(cluster, "binary", 1))
    assert stored == [(b"k\xff", b"v\xfe\x00"), (b"plain", b"text")]
    code, out, _ = consume(cluster, capsys, "binary", "--from-beginning", "--timeout-ms", "500")
    assert code == 0
    assert out == ["v\ufffd\x00", "text"]


def test_consume_partition_filter_max_messages_and_timeout(
    cluster: ClusterThread, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    create(cluster, "spread", 2, 1)
    values = [f"v{i}" for i in range(20)]
    feed_stdin(monkeypatch, "\n".join(values) + "\n")
    assert cli_data.main(["produce", "spread", "--bootstrap", cluster.bootstrap]) == 0

    code, out, _ = consume(
        cluster, capsys, "spread", "--from-beginning", "--timeout-ms", "500", "--print-offsets"
    )
    assert code == 0
    counts = {p: sum(1 for line in out if line.split("\t")[0] == str(p)) for p in (0, 1)}
    assert sum(counts.values()) == 20

    for partition in (0, 1):
        code, out, _ = consume(
            cluster,
            capsys,
            "spread",
            "--from-beginning",
            "--partition",
            str(partition),
            "--print-offsets",
            "--timeout-ms",
            "1000",
        )
        assert code == 0
        assert len(out) == counts[partition]
        assert all(line.startswith(f"{partition}\t") for line in out), out

    code, out, err = consume(cluster, capsys, "spread", "--from-beginning", "--max-messages", "7")
    assert code == 0
    assert len(out) == 7
    assert set(out) <= set(values)
    assert "Processed a total of 7 message(s)" in err

    # Without --from-beginning only new records count: none come, so it stops at the timeout.
    started = time.monotonic()
    code, out, err = consume(cluster, capsys, "spread", "--timeout-ms", "300")
    elapsed = time.monotonic() - started
    assert (code, out) == (0, [])
    assert "Processed a total of 0 message(s)" in err
    assert 0.3 <= elapsed < 10, elapsed


def test_produce_acks_levels_and_empty_lines(
    cluster: ClusterThread, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    create(cluster, "acks", 1, 2)
    for acks, value in (("0", "zero"), ("1", "one"), ("all", "")):
        feed_stdin(monkeypatch, f"{value}\n")
        argv = ["produce", "acks", "--acks", acks, "--bootstrap", cluster.bootstrap]
        assert cli_data.main(argv) == 0, capsys.readouterr().err
    # acks=0 is not acknowledged, but nothing failed on the way, so the record is there.
    code, out, _ = consume(
        cluster, capsys, "acks", "--from-beginning", "--timeout-ms", "1000", "--max-messages", "3"
    )
    assert code == 0
    assert out == ["zero", "one", ""]


def test_produce_line_without_separator_fails(
    cluster: ClusterThread, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    create(cluster, "strict", 1, 1)
    feed_stdin(monkeypatch, "k1=a\nno separator here\nk2=b\n")
    capsys.readouterr()
    argv = ["produce", "strict", "--key-separator", "=", "--bootstrap", cluster.bootstrap]
    assert cli_data.main(argv) == 1
    err = capsys.readouterr().err
    assert "line 2: no key separator" in err
    assert "2 of 3 record(s) acknowledged" in err


# ---------------------------------------------------------------------------------------------
# cluster status


def test_cluster_status_json_and_table(
    cluster: ClusterThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    argv = ["cluster", "status", "--json", "--bootstrap", cluster.bootstrap]
    assert cli_status.main(argv) == 0
    status = json.loads(capsys.readouterr().out)
    assert set(status) == {"cluster_id", "controller", "brokers"}
    assert len(status["cluster_id"]) == 22  # a Uuid in Kafka's text form
    assert status["controller"] == {
        "id": cluster.controller_id,
        "host": None,  # DescribeCluster does not carry it; no cluster.json given
        "port": None,
        "epoch": status["controller"]["epoch"],
    }
    assert status["controller"]["epoch"] >= 1
    assert [b["id"] for b in status["brokers"]] == list(range(BROKERS))
    for broker, address in zip(status["brokers"], cluster.addresses, strict=True):
        assert broker == {
            "id": broker["id"],
            "host": address.host,
            "port": address.port,
            "state": "running",
            "offline_log_dirs": [],
        }

    assert cluster.controller_address is not None
    cluster_file = {
        "controller": {
            "id": cluster.controller_id,
            "pid": 1,
            "host": cluster.controller_address.host,
            "port": cluster.controller_address.port,
        },
        "brokers": [],
    }
    (tmp_path / "cluster.json").write_text(json.dumps(cluster_file))
    argv += ["--data-dir", str(tmp_path)]
    assert cli_status.main(argv) == 0
    controller = json.loads(capsys.readouterr().out)["controller"]
    assert (controller["host"], controller["port"]) == (
        cluster.controller_address.host,
        cluster.controller_address.port,
    )

    assert cli_status.main(["cluster", "status", "--bootstrap", cluster.bootstrap]) == 0
    table = capsys.readouterr().out
    assert f"Controller {cluster.controller_id}" in table
    assert f"Cluster {status['cluster_id']}" in table
    assert table.count("running") == BROKERS

    missing = ["cluster", "status", "--bootstrap", cluster.bootstrap]
    assert cli_status.main([*missing, "--data-dir", str(tmp_path / "nowhere")]) == 1
    assert "no cluster.json" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# errors: unreachable cluster, unknown topic, bad flags


@pytest.mark.parametrize(
    "argv",
    [
        ["topic", "list"],
        ["topic", "describe", "t"],
        ["topic", "create", "t", "--partitions", "1", "--replication-factor", "1"],
        ["consume", "t", "--timeout-ms", "100"],
        ["produce", "t"],
        ["cluster", "status"],
    ],
)
def test_unreachable_cluster_exits_1(
    argv: list[str],
    unreachable: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    feed_stdin(monkeypatch, "x\n")
    # The commands keep trying an unreachable list for CLI_REACH_TIMEOUT_MS (5 s); the message
    # is the point here (tests/integration/test_cli_bootstrap.py times the whole wait).
    monkeypatch.setattr(cli_common, "CLI_REACH_TIMEOUT_MS", 200)
    main = {"topic": cli_topic.main, "cluster": cli_status.main}.get(argv[0], cli_data.main)
    assert main([*argv, "--bootstrap", unreachable]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach the cluster at {unreachable}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["topic", "describe", "no-such-topic"],
        ["consume", "no-such-topic", "--timeout-ms", "100"],
        ["produce", "no-such-topic"],
    ],
)
def test_unknown_topic_exits_1(
    argv: list[str],
    cluster: ClusterThread,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    feed_stdin(monkeypatch, "x\n")
    main = cli_topic.main if argv[0] == "topic" else cli_data.main
    assert main([*argv, "--bootstrap", cluster.bootstrap]) == 1
    assert "unknown topic 'no-such-topic'" in capsys.readouterr().err


def test_consume_unknown_partition_exits_1(
    cluster: ClusterThread, capsys: pytest.CaptureFixture[str]
) -> None:
    create(cluster, "narrow", 1, 1)
    code, _, err = consume(cluster, capsys, "narrow", "--partition", "5", "--timeout-ms", "100")
    assert code == 1
    assert "has no partition 5" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["topic", "create", "t", "--partitions", "0", "--replication-factor", "1"],
        ["topic", "create", "a b"],  # an illegal name: refused before anything is sent
        ["topic", "create", "t", "--partitions", "1", "--replication-factor", "1", "--config", "x"],
        ["topic", "list", "--bootstrap", "no-port"],
        ["topic"],
        ["produce", "t", "--acks", "2"],
        ["produce", "t", "--key-separator", ""],
        ["consume", "t", "--max-messages", "0"],
        ["consume", "t", "--timeout-ms", "soon"],
        ["consume"],
        ["cluster", "status", "--yaml"],
        ["config", "show", "--set"],
        ["group", "describe"],
        ["group", "list", "--bootstrap", "no-port"],
        ["group"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    main = {
        "topic": cli_topic.main,
        "group": cli_group.main,
        "cluster": cli_status.main,
        "config": cli_status.main,
    }.get(argv[0], cli_data.main)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "usage:" in err
    assert "error:" in err


# ---------------------------------------------------------------------------------------------
# config show


def _shown(out: str) -> dict[str, tuple[str, str]]:
    """`"key" = value  # source` lines -> {key: (value, source)}."""
    shown = {}
    for line in out.splitlines():
        if line.startswith("#") or not line:
            continue
        assignment, _, source = line.rpartition("  # ")
        key, _, value = assignment.partition(" = ")
        shown[json.loads(key)] = (value, source)
    return shown


def test_config_show_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "ketch.toml"
    config.write_text('"replica.lag.time.max.ms" = 10000\n"min.insync.replicas" = 2\n')
    argv = ["config", "show", "--config", str(config), "--set", "min.insync.replicas=3"]
    assert cli_status.main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    shown = _shown(captured.out)
    assert shown["replica.lag.time.max.ms"] == ("10000", Source.FILE.value)
    assert shown["min.insync.replicas"] == ('"3"', Source.FLAG.value)
    assert shown["log.segment.bytes"][1] == Source.DEFAULT.value
    # the controller's properties are there too
    assert shown["unclean.leader.election.enable"] == ("false", Source.DEFAULT.value)
    assert shown["node.id"][1] == Source.DEFAULT.value
    assert str(config) in captured.out


def test_config_show_refuses_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_status.main(["config", "show", "--set", "replica.lag.time.max.m=5"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "ketch config show: --set replica.lag.time.max.m=5: unknown property "
        '(did you mean "replica.lag.time.max.ms"?)\n'
    )
    assert captured.out == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "min.insync.replicas=many"], "min.insync.replicas"),
        (["--set", "broker.session.timeout.ms=0"], "broker.session.timeout.ms"),
        (["--set", "novalue"], "expected key=value"),
        (["--config", "/nonexistent/ketch.toml"], "config file not found"),
    ],
)
def test_config_show_refuses_bad_configuration(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_status.main(["config", "show", *argv]) == 2
    assert message in capsys.readouterr().err


def test_controller_property_names_are_the_ones_it_reads() -> None:
    """Each ControllerConfig name `config show` lists must be read by
    `ControllerConfig.from_properties`: setting it to another value changes the config."""
    from actors.controller.messages import ControllerConfig
    from cli import config_cmd
    from node.controller import main as controller_main

    defaults = controller_main.controller_config_defaults()
    assert set(defaults) <= set(config_cmd.node_property_defaults())
    assert "node.id" in defaults
    base = ControllerConfig()
    for name, value in defaults.items():
        changed: object = (not value) if isinstance(value, bool) else int(value) + 7
        assert ControllerConfig.from_properties({name: changed}) != base, name


# ---------------------------------------------------------------------------------------------
# Ctrl-C


def _child(cluster: ClusterThread, argv: list[str]) -> subprocess.Popen[bytes]:
    """A `ketch produce|consume` process (the module's main, as the entry point calls it)."""
    argv = [*argv, "--bootstrap", cluster.bootstrap]
    code = f"import sys; from cli import data as cli_data; sys.exit(cli_data.main({argv!r}))"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_sigint_as_from_a_terminal,
    )


def _sigint_as_from_a_terminal() -> None:
    """Give the child SIGINT's default disposition, as an interactive shell does. A suite run
    as a background job of a non-interactive shell (`bash .ci/run &`) inherits SIGINT ignored,
    and a command honours an inherited SIG_IGN (Python then installs no KeyboardInterrupt
    handler): the Ctrl-C test's producer then went on to the end of its input and exited 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_produce_and_consume_promptly(cluster: ClusterThread) -> None:
    """An interactive produce (stdin open, nothing more typed) and an endless consume both end
    on SIGINT with 130, without waiting for input or a timeout."""
    create(cluster, "typed", 1, 1)
    producer = _child(cluster, ["produce", "typed"])
    consumer = _child(cluster, ["consume", "typed", "--from-beginning", "--timeout-ms", "60000"])
    try:
        assert producer.stdin is not None
        assert consumer.stdout is not None
        producer.stdin.write(b"hello\n")
        producer.stdin.flush()  # stdin stays open: the producer waits for the next line
        # The consumer prints the line once the producer sent it: both are now running.
        ready, _, _ = select.select([consumer.stdout], [], [], CHILD_WAIT_S)
        assert ready, "the consumer printed nothing in time"
        assert consumer.stdout.readline() == b"hello\n"
        for child in (producer, consumer):
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=CHILD_WAIT_S)
            assert child.returncode == 130, err.decode()
            assert b"interrupted" in err
            assert b"Traceback" not in err
        assert b"Processed a total of 1 message(s)" in err  # the consumer's, printed last
    finally:
        for child in (producer, consumer):
            if child.poll() is None:
                child.kill()
                child.communicate()


def test_other_cluster_commands_join_the_cluster_group() -> None:
    """`register(..., cluster_extensions)` puts another module's commands (shutdown-broker,
    start-broker) next to `status` under one `cluster` parser, dispatching on `func` and on
    `handler` (cli/main.py's attribute)."""

    def shutdown_broker(args: argparse.Namespace) -> int:
        return 40 + int(args.broker_id)

    def extension(cluster_subparsers: SubParsers[argparse.ArgumentParser]) -> None:
        parser = cluster_subparsers.add_parser("shutdown-broker")
        parser.add_argument("broker_id")
        parser.set_defaults(func=shutdown_broker)

    parser = argparse.ArgumentParser(prog="ketch")
    commands = parser.add_subparsers(dest="command", required=True)
    cli_status.register(commands, cluster_extensions=[extension])
    args = parser.parse_args(["cluster", "shutdown-broker", "2"])
    assert args.func(args) == 42
    status = parser.parse_args(["cluster", "status", "--json"])
    # set_command wraps the command (to fill in a default --bootstrap); unwrap gives it back.
    assert inspect.unwrap(status.func) is cli_status.cmd_cluster_status
    assert inspect.unwrap(status.handler) is cli_status.cmd_cluster_status


def test_produce_from_a_real_pipe(
    cluster: ClusterThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """stdin as a process gets it (a pipe, read by descriptor), with a last line that has no
    line end: every line is a record."""
    create(cluster, "piped", 1, 1)
    producer = _child(cluster, ["produce", "piped", "--acks", "1"])
    try:
        _, err = producer.communicate(b"first\r\nsecond\nlast", timeout=CHILD_WAIT_S)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.communicate()
    assert producer.returncode == 0, err.decode()
    assert b"3 of 3 record(s) acknowledged (acks=1)" in err
    code, out, _ = consume(cluster, capsys, "piped", "--from-beginning", "--timeout-ms", "500")
    assert code == 0
    assert out == ["first", "second", "last"]
