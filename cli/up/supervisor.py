"""`ketch up`: a local cluster in the foreground — the controller and N brokers as child processes.

    ketch up [--brokers 3] [--data-dir ./data] [--port 9092] [--kafka-port 19092] [--config F]

Broker i listens on 127.0.0.1:<port+i> (the native protocol) and on 127.0.0.1:<kafka-port+i>
(the Kafka wire protocol, for Kafka clients: `--kafka-listen`), the controller on
127.0.0.1:<port+100>; `--kafka-port -1` runs the brokers without Kafka listeners. Each node's
Prometheus endpoint is at port+200+i (the controller's at port+300). The data layout is
cli/up/layout.py's. Each child is `python -m cli.main controller|broker ...` with its
stdout and stderr appended to `<data-dir>/logs/<node>.log`, and with `--config F` passed on, so
one TOML file configures every node. Children run in their own session: a Ctrl-C at the terminal
reaches only the supervisor, which then stops the nodes in order. Should the supervisor itself be
killed, Linux sends each child SIGTERM (PR_SET_PDEATHSIG), so no node outlives it holding the
ports and log-dir locks the next `ketch up` needs.

Lifecycle:
  1. Prepare the layout (the secret is created once) and refuse to start when another
     supervisor already serves this data dir.
  2. Start the controller, then the brokers, and serve the control socket (cli/up/control.py).
  3. Ready when DescribeCluster through a broker lists every broker as running: print a status
     table, write cluster.json. Not ready within READY_TIMEOUT_S: stop everything, exit 1.
  4. SIGINT / SIGTERM: each broker gets SIGTERM (its controlled shutdown, then a clean stop)
     and is waited for, one after another, then the controller; exit 0. A second signal while
     stopping changes nothing; a child that does not exit within STOP_TIMEOUT_S is killed.
A child that exits while it should run is reported and restarted after a backoff (doubling from
RESTART_BACKOFF_S up to RESTART_BACKOFF_MAX_S, reset after it ran for STABLE_RUN_S), unless the
cluster is stopping or the broker was stopped by `ketch cluster shutdown-broker`. Running
`ketch up` again on the same data dir restarts the same nodes on the same directories, so the
controller replays its metadata log and the brokers recover their logs.

Each child's state is a small machine (`ChildState`, transition table `_TRANSITIONS`): DOWN ->
RUNNING on spawn; RUNNING -> STOPPING when asked to stop, -> BACKOFF when it died, -> DOWN when it
exited while a stop was under way; STOPPING -> DOWN when it exited; BACKOFF -> RUNNING on respawn,
-> DOWN when a stop arrives during the wait.

Ownership: everything runs on the supervisor's one event loop. Each child's state is changed only
by its keeper task (spawn, wait, backoff) and by `_stop_child` / `_start_child`, which control
commands call one at a time (`_control_lock`, so a start never interleaves with a stop); signal
handlers only set an event.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import enum
import io
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.table import Table

from cli.up.control import (
    EXIT_USAGE,
    PING,
    SHUTDOWN_BROKER,
    START_BROKER,
    ControlReply,
    ControlRequest,
    decode_request,
    failed,
    ok,
    supervisor_running,
)
from cli.up.layout import (
    CONTROLLER_NODE,
    Layout,
    NodeEntry,
    broker_node,
    cluster_document,
    write_json_atomically,
)
from client.client import Client
from client.config import ClientConfig
from client.errors import ClientError
from runtime.clock import SystemClock
from runtime.net.tcp import TcpTransport, new_event_loop
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError
from wire.messages import DescribeClusterRequest, DescribeClusterResponse

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1

HOST: Final = "127.0.0.1"
CONTROLLER_PORT_OFFSET: Final = 100
KAFKA_OFF: Final = -1  # `--kafka-port -1`: no Kafka-protocol listeners
# Each node's Prometheus endpoint (GET /metrics): broker i at port+200+i, the controller at
# port+300.
METRICS_PORT_OFFSET: Final = 200
# The module each child runs with `python -m`; its `controller` and `broker` subcommands are
# DESIGN.md's `ketch controller` / `ketch broker`.
CHILD_MODULE: Final = "cli.main"

READY_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 60.0  # a controlled shutdown retries, but a hung child must not hang us
RESTART_BACKOFF_S: Final = 0.5
RESTART_BACKOFF_MAX_S: Final = 10.0
STABLE_RUN_S: Final = 30.0
POLL_INTERVAL_S: Final = 0.1
_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
# The readiness poll talks to local brokers that either answer at once or are not up yet.
_POLL_CLIENT_CONFIG: Final = ClientConfig(
    request_timeout_ms=2_000,
    socket_connection_setup_timeout_ms=1_000,
    delivery_timeout_ms=2_000,
    reconnect_backoff_ms=50,
    reconnect_backoff_max_ms=200,
)


class ChildState(enum.Enum):
    DOWN = "down"
    RUNNING = "running"
    STOPPING = "stopping"
    BACKOFF = "restarting"


_TRANSITIONS: Final[dict[ChildState, frozenset[ChildState]]] = {
    ChildState.DOWN: frozenset({ChildState.RUNNING}),
    ChildState.RUNNING: frozenset({ChildState.STOPPING, ChildState.BACKOFF, ChildState.DOWN}),
    ChildState.STOPPING: frozenset({ChildState.DOWN}),
    ChildState.BACKOFF: frozenset({ChildState.RUNNING, ChildState.DOWN}),
}


@dataclass(frozen=True, slots=True)
class UpOptions:
    brokers: int
    data_dir: Path
    port: int
    kafka_port: int  # the base port of the Kafka listeners, or KAFKA_OFF
    config: Path | None

    def bindings(self) -> list[tuple[int, str]]:
        """Every port the cluster's nodes bind, each with what binds it."""
        controller_metrics = self.port + METRICS_PORT_OFFSET + CONTROLLER_PORT_OFFSET
        used = [
            (self.port + CONTROLLER_PORT_OFFSET, "the controller"),
            (controller_metrics, "the controller's metrics"),
        ]
        for i in range(self.brokers):
            used.append((self.port + i, f"broker {i}"))
            used.append((self.port + METRICS_PORT_OFFSET + i, f"broker {i}'s metrics"))
            if self.kafka_port != KAFKA_OFF:
                used.append((self.kafka_port + i, f"broker {i}'s Kafka listener"))
        return used


@dataclass(frozen=True, slots=True)
class ChildSpec:
    node: str  # "controller" or "broker-<id>": the log file's name and the report's label
    broker_id: int | None
    address: Address
    argv: tuple[str, ...]
    log_file: Path
    kafka_address: Address | None = None  # a broker's Kafka-protocol listener, when it has one


@dataclass(slots=True)
class Child:
    spec: ChildSpec
    state: ChildState = ChildState.DOWN
    process: asyncio.subprocess.Process | None = None
    wanted: bool = False  # should be running: False once stopped on purpose or when stopping
    restarts: int = 0
    keeper: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # cuts a backoff wait short

    def move(self, target: ChildState) -> None:
        assert target in _TRANSITIONS[self.state], (self.spec.node, self.state, target)
        self.state = target

    @property
    def pid(self) -> int | None:
        if self.state in (ChildState.RUNNING, ChildState.STOPPING) and self.process is not None:
            return self.process.pid
        return None


def child_specs(options: UpOptions, layout: Layout) -> tuple[ChildSpec, list[ChildSpec]]:
    controller_address = Address(HOST, options.port + CONTROLLER_PORT_OFFSET)
    common: tuple[str, ...] = ("--secret-file", str(layout.secret_file))
    if options.config is not None:
        common += ("--config", str(options.config))
    prefix = (sys.executable, "-m", CHILD_MODULE)
    controller = ChildSpec(
        CONTROLLER_NODE,
        None,
        controller_address,
        (
            *prefix,
            "controller",
            "--data-dir",
            str(layout.controller_dir),
            "--listen",
            str(controller_address),
            *common,
            "--set",
            f"metrics.port={options.port + METRICS_PORT_OFFSET + CONTROLLER_PORT_OFFSET}",
        ),
        layout.log_file(CONTROLLER_NODE),
    )
    brokers = []
    for broker_id in range(options.brokers):
        address = Address(HOST, options.port + broker_id)
        kafka_address = None
        kafka: tuple[str, ...] = ()
        if options.kafka_port != KAFKA_OFF:
            kafka_address = Address(HOST, options.kafka_port + broker_id)
            kafka = ("--kafka-listen", str(kafka_address))
        argv = (
            *prefix,
            "broker",
            "--id",
            str(broker_id),
            "--data-dir",
            str(layout.broker_dir(broker_id)),
            "--listen",
            str(address),
            *kafka,
            "--controller",
            str(controller_address),
            *common,
            "--set",
            f"metrics.port={options.port + METRICS_PORT_OFFSET + broker_id}",
        )
        node = broker_node(broker_id)
        brokers.append(
            ChildSpec(node, broker_id, address, argv, layout.log_file(node), kafka_address)
        )
    return controller, brokers


class Supervisor:
    def __init__(self, options: UpOptions, console: Console) -> None:
        self.options = options
        self.layout = Layout(options.data_dir)
        self.console = console
        controller, brokers = child_specs(options, self.layout)
        self.controller = Child(controller)
        self.brokers = {i: Child(spec) for i, spec in enumerate(brokers)}
        self.stopping = asyncio.Event()
        self.ready = False
        self.controller_id = -1  # from DescribeCluster once ready
        self._control_lock = asyncio.Lock()
        self._server: asyncio.AbstractServer | None = None

    # -----------------------------------------------------------------------------------------
    # The run

    async def run(self) -> int:
        self._install_signal_handlers()
        # A cluster.json left by a `ketch up` that was killed describes processes that are gone.
        with contextlib.suppress(FileNotFoundError):
            self.layout.cluster_json.unlink()
        try:
            await self._start_control_server()
            self._start_child(self.controller)
            for child in self.brokers.values():
                self._start_child(child)
            code = await self._until_ready_or_stopped()
            if code == EXIT_OK and not self.stopping.is_set():
                self._print_status()
                self._publish()
                await self.stopping.wait()
            return code
        finally:
            await self._shutdown()
            self._remove_signal_handlers()

    async def _until_ready_or_stopped(self) -> int:
        ids = sorted(self.brokers)
        waiter = asyncio.create_task(self._wait_registered(ids, READY_TIMEOUT_S))
        stop = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
        if self.stopping.is_set():
            return EXIT_OK  # stopped before it was ready: what the user asked for
        if not waiter.result():
            self.console.print(
                f"[red]ketch up: the cluster was not ready within {READY_TIMEOUT_S:.0f} s[/] "
                f"(see {self.layout.logs_dir}/)"
            )
            return EXIT_FAILED
        self.ready = True
        return EXIT_OK

    async def _shutdown(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.close()
        # Brokers one at a time: each controlled shutdown moves leadership to brokers that are
        # still up; the controller last, because the controlled shutdowns go through it.
        for child in self.brokers.values():
            await self._stop_child(child)
        await self._stop_child(self.controller)
        if self._server is not None:
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.layout.socket_path.unlink()
        with contextlib.suppress(FileNotFoundError):
            self.layout.cluster_json.unlink()
        self.console.print("ketch up: stopped")

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._on_signal, signum)

    def _remove_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.stopping.is_set():
            self.console.print(f"ketch up: {name} while stopping: still stopping")
            return
        self.console.print(f"ketch up: {name}: stopping the brokers, then the controller")
        self.stopping.set()

    # -----------------------------------------------------------------------------------------
    # Children

    def _start_child(self, child: Child) -> None:
        child.wanted = True
        if child.keeper is None or child.keeper.done():
            child.wake.clear()
            child.keeper = asyncio.create_task(self._keep(child), name=f"keep-{child.spec.node}")

    async def _keep(self, child: Child) -> None:
        """Run the child while it is wanted; restart it with backoff when it dies."""
        backoff_s = RESTART_BACKOFF_S
        while True:
            started = time.monotonic()
            code = await self._run_once(child)
            if not child.wanted or self.stopping.is_set():
                child.move(ChildState.DOWN)
                self._publish()
                return
            ran_s = time.monotonic() - started
            if ran_s >= STABLE_RUN_S:
                backoff_s = RESTART_BACKOFF_S
            child.move(ChildState.BACKOFF)
            self._publish()
            self.console.print(
                f"[yellow]ketch up: {child.spec.node} exited ({describe_exit(code)}) after "
                f"{ran_s:.1f} s; restarting in {backoff_s:.1f} s[/] (see {child.spec.log_file})"
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(child.wake.wait(), backoff_s)
            backoff_s = min(backoff_s * 2, RESTART_BACKOFF_MAX_S)
            if not child.wanted or self.stopping.is_set():
                child.move(ChildState.DOWN)
                return
            child.restarts += 1

    async def _run_once(self, child: Child) -> int | None:
        """Spawn the child and wait for its exit; its exit code, None when it could not start."""
        spec = child.spec
        with spec.log_file.open("ab") as out:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            out.write(f"--- ketch up: starting {spec.node} at {stamp}\n".encode())
            out.flush()
            try:
                process = await asyncio.create_subprocess_exec(
                    *spec.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                out.write(f"--- ketch up: cannot start {spec.node}: {exc}\n".encode())
                child.move(ChildState.RUNNING)  # a spawn that failed at once counts as a death
                return None
        child.process = process
        child.move(ChildState.RUNNING)
        if not child.wanted:
            # A stop arrived while the process was being spawned: it found nothing to signal.
            child.move(ChildState.STOPPING)
            process.send_signal(signal.SIGTERM)
        self._publish()
        return await process.wait()

    async def _stop_child(self, child: Child) -> None:
        """Stop the child and wait until it is down (SIGTERM, then SIGKILL after a timeout)."""
        child.wanted = False
        child.wake.set()
        keeper = child.keeper
        if keeper is None or keeper.done():
            return
        if child.state is ChildState.RUNNING and child.process is not None:
            child.move(ChildState.STOPPING)
            self.console.print(f"ketch up: stopping {child.spec.node} (pid {child.process.pid})")
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(keeper), STOP_TIMEOUT_S)
        except TimeoutError:
            self.console.print(
                f"[red]ketch up: {child.spec.node} did not stop within {STOP_TIMEOUT_S:.0f} s: "
                "killed[/]"
            )
            if child.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    child.process.kill()
            await keeper

    # -----------------------------------------------------------------------------------------
    # Readiness and status

    async def _wait_registered(self, broker_ids: Sequence[int], timeout_s: float) -> bool:
        """Poll DescribeCluster through the brokers until every one of `broker_ids` is running."""
        deadline = time.monotonic() + timeout_s
        addresses = [self.brokers[i].spec.address for i in sorted(self.brokers)]
        client = Client(
            addresses,
            transport=TcpTransport(),
            clock=SystemClock(),
            client_id="ketch-up",
            config=_POLL_CLIENT_CONFIG,
        )
        try:
            while time.monotonic() < deadline and not self.stopping.is_set():
                running = await self._running_brokers(client, addresses)
                if running is not None and set(broker_ids) <= running:
                    return True
                await asyncio.sleep(POLL_INTERVAL_S)
            return False
        finally:
            await client.close()

    async def _running_brokers(self, client: Client, addresses: list[Address]) -> set[int] | None:
        """The brokers the controller reports running, asked through any broker that answers."""
        for address in addresses:
            try:
                response = await client.send(address, DescribeClusterRequest())
            except (ClientError, KafkaError, OSError):
                continue
            if not isinstance(response, DescribeClusterResponse):
                continue
            if response.error_code != ErrorCode.NONE:
                continue
            self.controller_id = response.controller_id
            return {b.broker_id for b in response.brokers if b.state == "running"}
        return None

    def _publish(self) -> None:
        """Rewrite cluster.json (once ready): it names the pids of the running nodes."""
        if not self.ready or self.stopping.is_set():
            return
        controller = NodeEntry(
            self.controller_id,
            self.controller.pid,
            self.controller.spec.address.host,
            self.controller.spec.address.port,
        )
        brokers = [
            NodeEntry(
                i,
                c.pid,
                c.spec.address.host,
                c.spec.address.port,
                None if c.spec.kafka_address is None else c.spec.kafka_address.port,
            )
            for i, c in sorted(self.brokers.items())
        ]
        write_json_atomically(
            self.layout.cluster_json, cluster_document(controller, brokers, self.layout)
        )

    def _print_status(self) -> None:
        table = Table(title=f"ketch cluster at {self.layout.root}")
        for column in ("node", "id", "pid", "listener", "kafka", "state", "data dir", "log"):
            table.add_column(column, no_wrap=True)
        rows = [(self.controller, self.controller_id, self.layout.controller_dir)]
        rows += [(c, i, self.layout.broker_dir(i)) for i, c in sorted(self.brokers.items())]
        for child, node_id, data_dir in rows:
            table.add_row(
                child.spec.node,
                str(node_id),
                str(child.pid or "-"),
                str(child.spec.address),
                "-" if child.spec.kafka_address is None else str(child.spec.kafka_address.port),
                child.state.value,
                # Relative to the title's directory: short enough for an 80-column terminal.
                f"{data_dir.relative_to(self.layout.root)}/",
                str(child.spec.log_file.relative_to(self.layout.root)),
            )
        self.console.print(table)
        first = self.brokers[min(self.brokers)].spec
        kafka = "" if first.kafka_address is None else f", Kafka clients {first.kafka_address}"
        self.console.print(
            f"ready: bootstrap {first.address}{kafka}; "
            f"writing {self.layout.cluster_json}. Ctrl-C stops the cluster."
        )

    # -----------------------------------------------------------------------------------------
    # Control socket (cli/up/control.py)

    async def _start_control_server(self) -> None:
        path = self.layout.socket_path
        # A socket file nobody answers on was left by a supervisor that was killed.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self._server = await asyncio.start_unix_server(self._serve_control, path=str(path))
        path.chmod(0o600)

    async def _serve_control(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            line = await reader.readline()
            decoded = decode_request(line)
            if isinstance(decoded, ControlRequest):
                async with self._control_lock:
                    reply = await self._control(decoded)
            else:
                reply = decoded
            writer.write(reply.encode())
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the command went away; what it asked for is done or undone anyway
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _control(self, request: ControlRequest) -> ControlReply:
        if request.command == PING:
            return ok("running")
        if self.stopping.is_set():
            return failed("the cluster is stopping")
        child = self.brokers.get(request.broker) if request.broker is not None else None
        if child is None:
            known = ", ".join(str(i) for i in sorted(self.brokers))
            return failed(f"unknown broker id {request.broker} (brokers: {known})", EXIT_USAGE)
        if request.command == SHUTDOWN_BROKER:
            return await self._shutdown_broker(child)
        assert request.command == START_BROKER, request
        return await self._start_broker(child)

    async def _shutdown_broker(self, child: Child) -> ControlReply:
        if not child.wanted and child.state is ChildState.DOWN:
            return ok(f"{child.spec.node} is already stopped")
        await self._stop_child(child)
        self._publish()
        self.console.print(f"ketch up: {child.spec.node} stopped (until start-broker)")
        return ok(f"{child.spec.node} stopped; it stays down until start-broker")

    async def _start_broker(self, child: Child) -> ControlReply:
        assert child.spec.broker_id is not None, child.spec
        if child.wanted:
            return ok(f"{child.spec.node} is already running")
        self._start_child(child)
        self.console.print(f"ketch up: starting {child.spec.node}")
        if not await self._wait_registered([child.spec.broker_id], READY_TIMEOUT_S):
            return failed(
                f"{child.spec.node} started but did not register within "
                f"{READY_TIMEOUT_S:.0f} s (see {child.spec.log_file})"
            )
        self._publish()
        self.console.print(f"ketch up: {child.spec.node} registered (pid {child.pid})")
        return ok(f"{child.spec.node} started and registered (pid {child.pid})")


def _die_with_parent() -> None:
    """In the child between fork and exec (Linux): SIGTERM it when the supervisor dies.

    Without this a supervisor killed by SIGKILL would leave its nodes running, holding the
    ports and the log-dir locks the next `ketch up` needs; SIGTERM gives each node its clean
    stop. Elsewhere (no prctl) the children outlive a killed supervisor, as they would anyway.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "could not start"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


# ---------------------------------------------------------------------------------------------
# Command line


def add_up_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument("--data-dir", type=Path, default=Path("./data"), help="default ./data")
    parser.add_argument(
        "--port",
        type=int,
        default=9092,
        help="broker i listens on port+i, the controller on port+100",
    )
    parser.add_argument(
        "--kafka-port",
        type=int,
        default=19092,
        help="broker i's Kafka-protocol listener is on kafka-port+i (default 19092; -1: none)",
    )
    parser.add_argument("--config", type=Path, help="TOML file of Kafka properties for every node")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `ketch up` to the `ketch` command's subparsers."""
    up = subparsers.add_parser("up", help="run a local cluster in the foreground")
    add_up_arguments(up)
    # cli.py dispatches on `handler`, the command modules' brief on `func`: either works.
    up.set_defaults(func=command, handler=command)


def options_from_args(args: argparse.Namespace) -> UpOptions | str:
    """The options, or the usage error to print."""
    if args.brokers < 1:
        return f"--brokers must be at least 1, got {args.brokers}"
    if args.brokers > CONTROLLER_PORT_OFFSET:
        return f"--brokers must be at most {CONTROLLER_PORT_OFFSET} (the controller is on port+100)"
    # The highest port is the controller's metrics endpoint.
    if args.port <= 0 or args.port + METRICS_PORT_OFFSET + CONTROLLER_PORT_OFFSET > 65_535:
        return f"--port out of range: {args.port}"
    if args.kafka_port != KAFKA_OFF and not 0 < args.kafka_port <= 65_536 - args.brokers:
        return f"--kafka-port out of range: {args.kafka_port} (-1 runs without Kafka listeners)"
    config: Path | None = args.config
    if config is not None:
        if not config.is_file():
            return f"config file not found: {config}"
        config = config.resolve()
    options = UpOptions(args.brokers, args.data_dir.resolve(), args.port, args.kafka_port, config)
    return _port_overlap(options) or options


def _port_overlap(options: UpOptions) -> str | None:
    """The usage error when two nodes would bind one port (one of them would exit at start).
    With at most 100 brokers only a Kafka listener can overlap another node's port."""
    owners: dict[int, str] = {}
    for port, owner in options.bindings():
        if port in owners:
            return (
                f"--kafka-port {options.kafka_port} overlaps --port {options.port}: "
                f"{owners[port]} and {owner} would both bind port {port}"
            )
        owners[port] = owner
    return None


def command(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    if isinstance(options, str):
        print(f"ketch up: {options}", file=sys.stderr)
        return EXIT_USAGE
    return run(options)


def run(options: UpOptions) -> int:
    # Reports are events (ready, a child died): they must reach a log file or pipe when they
    # happen, not when a block buffer fills.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    # Not a terminal (a log file, a pipe): wide enough that the table's columns stay whole.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    layout = Layout(options.data_dir)
    try:
        layout.prepare(range(options.brokers))
    except OSError as exc:
        print(f"ketch up: cannot prepare {options.data_dir}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if supervisor_running(options.data_dir):
        print(f"ketch up: a cluster is already running at {options.data_dir}", file=sys.stderr)
        return EXIT_FAILED
    if len(os.fsencode(layout.socket_path)) >= 100:  # sun_path holds 108 bytes on Linux
        print(f"ketch up: the data dir path is too long for {layout.socket_path}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(Supervisor(options, console).run())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ketch up", description="Run a local ketch cluster.")
    add_up_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
