"""`ketch up`: a local cluster in the foreground — the controller and N brokers as child processes.

    ketch up [--brokers 3] [--data-dir ./data] [--port 9092] [--kafka-port 19092] [--config F]
             [--tls]

The ports and the command line are cli/up/options.py's; the data layout and each node's command
line are node/layout.py's (shared with testkit's process cluster). Each child is `python -m
cli.main controller|broker ...` with its stdout and stderr appended to
`<data-dir>/logs/<node>.log`. Children run in their own session: a Ctrl-C at the terminal
reaches only the supervisor, which then stops the nodes in order. Should the supervisor itself be
killed, Linux sends each child SIGTERM (PR_SET_PDEATHSIG), so no node outlives it holding the
ports and log-dir locks the next `ketch up` needs.

Lifecycle:
  0. Check every node's configuration as the node will check it (the config file and the flags
     `ketch up` gives it, cli/up/options.py): a problem is a usage error, exit 2, one line per
     problem, and nothing starts.
  1. Prepare the layout (the secret is created once) and refuse to start when another
     supervisor already serves this data dir. With `--tls`, make a new CA and one certificate
     per node (cli/up/certificates.py; the CA's key is never written), every listener SSL;
     cluster.json then records the client properties (`tls`: security.protocol and
     ssl.truststore.location) that ketch's client commands use (cli/client_tls.py).
  2. Start the controller, then the brokers, and serve the control socket (cli/up/control.py).
  3. Ready when DescribeCluster through a broker lists every broker as running: print a status
     table, write cluster.json. Not ready within READY_TIMEOUT_S: stop everything, exit 1.
  4. SIGINT / SIGTERM: each broker gets SIGTERM (its controlled shutdown, then a clean stop)
     and is waited for, one after another, then the controller; exit 0. A second signal while
     stopping changes nothing; a child that does not exit within STOP_TIMEOUT_S is killed.
A child that exits while it should run is reported and restarted after a backoff (doubling from
RESTART_BACKOFF_S up to RESTART_BACKOFF_MAX_S, reset after it ran for STABLE_RUN_S), unless the
cluster is stopping or the broker was stopped by `ketch cluster shutdown-broker`. A child that
exits with EXIT_CONFIG (node/process.py: it refuses its configuration, or the cluster refused it
as one of another cluster) would refuse it again: it is not restarted; its reason and the last
lines of its log are printed (cli/up/report.py), the other nodes are stopped in order and
`ketch up` exits EXIT_CONFIG. Running `ketch up` again on the same data dir restarts the same
nodes on the same directories, so the controller replays its metadata log and the brokers
recover their logs.

Each child's state is a small machine (cli/up/child.py).

Ownership: everything runs on the supervisor's one event loop. Each child's state is changed only
by its keeper task (spawn, wait, backoff) and by `_stop_child` / `_start_child`, which control
commands call one at a time (`_control_lock`, so a start never interleaves with a stop); signal
handlers only set an event.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Final

from rich.console import Console

from cli.client_tls import CLUSTER_JSON_TLS_KEY
from cli.up.child import Child, ChildState, describe_exit, die_with_parent
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
    socket_path,
    supervisor_running,
)
from cli.up.options import (
    UP_EXAMPLES,
    UpOptions,
    add_up_arguments,
    child_specs,
    keystore_path,
    options_from_args,
    truststore_path,
)
from cli.up.report import refusal_report, start_line, status_table
from client.client import Client
from client.config import ClientConfig
from client.errors import ClientError
from node.layout import Layout, NodeEntry, cluster_document, write_json_atomically
from node.process import EXIT_CONFIG
from runtime.clock import SystemClock
from runtime.net.tcp import TcpTransport, new_event_loop
from runtime.net.tls import SECURITY_PROTOCOL_KEY, client_ssl_context
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError
from wire.messages import DescribeClusterRequest, DescribeClusterResponse

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1

READY_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 60.0  # a controlled shutdown retries, but a hung child must not hang us
RESTART_BACKOFF_S: Final = 0.5
RESTART_BACKOFF_MAX_S: Final = 10.0
STABLE_RUN_S: Final = 30.0
POLL_INTERVAL_S: Final = 0.1
# The readiness poll talks to local brokers that either answer at once or are not up yet.
_POLL_CLIENT_CONFIG: Final = ClientConfig(
    request_timeout_ms=2_000,
    socket_connection_setup_timeout_ms=1_000,
    delivery_timeout_ms=2_000,
    reconnect_backoff_ms=50,
    reconnect_backoff_max_ms=200,
)


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
        self.failure: int | None = None  # the exit code once a node refused its configuration
        self._control_lock = asyncio.Lock()
        self._server: asyncio.AbstractServer | None = None
        # With --tls: what a client needs to reach the brokers (written to cluster.json too).
        self.client_properties: dict[str, str] = {}
        if options.tls:
            self.client_properties = {
                SECURITY_PROTOCOL_KEY: "SSL",
                "ssl.truststore.location": str(truststore_path(self.layout)),
            }

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
            # Progress: a spinner on a terminal (nothing in a pipe) until every broker registered.
            with self.console.status(
                f"ketch up: starting the controller and {len(self.brokers)} broker(s) "
                f"(logs in {self.layout.logs_dir}/)"
            ):
                code = await self._until_ready_or_stopped()
            if code == EXIT_OK and not self.stopping.is_set():
                self._print_status()
                self._publish()
                await self.stopping.wait()
            return code if self.failure is None else self.failure
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
            socket_path(self.layout.root).unlink()
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
            if code == EXIT_CONFIG:
                child.move(ChildState.DOWN)
                self._refused(child)
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

    def _refused(self, child: Child) -> None:
        """A node refused its configuration: a restart would too, so the cluster stops."""
        for line in refusal_report(child):
            self.console.print(line)
        self.failure = EXIT_CONFIG
        self.stopping.set()

    async def _run_once(self, child: Child) -> int | None:
        """Spawn the child and wait for its exit; its exit code, None when it could not start."""
        spec = child.spec
        with spec.log_file.open("ab") as out:
            out.write(start_line(spec.node, time.strftime("%Y-%m-%d %H:%M:%S")).encode())
            out.flush()
            try:
                process = await asyncio.create_subprocess_exec(
                    *spec.argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
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
            transport=TcpTransport(ssl_client=client_ssl_context(self.client_properties)),
            clock=SystemClock(),
            client_id="ketch-up",
            config=_POLL_CLIENT_CONFIG,
            # As a cluster member: ACLs or SASL on the native listener refuse an anonymous poll.
            credential=self.layout.secret_file.read_bytes().strip(),
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
        document = cluster_document(controller, brokers, self.layout)
        if self.client_properties:
            document[CLUSTER_JSON_TLS_KEY] = self.client_properties
        write_json_atomically(self.layout.cluster_json, document)

    def _print_status(self) -> None:
        brokers = sorted(self.brokers.items())
        self.console.print(status_table(self.layout, self.controller, self.controller_id, brokers))
        first = self.brokers[min(self.brokers)].spec
        kafka = "" if first.kafka_address is None else f", Kafka clients {first.kafka_address}"
        tls = ""
        if self.options.tls:
            tls = f" (TLS: every listener SSL, CA {truststore_path(self.layout)})"
        self.console.print(
            f"ready{tls}: bootstrap {first.address}{kafka}; "
            f"writing {self.layout.cluster_json}. Ctrl-C stops the cluster."
        )

    # -----------------------------------------------------------------------------------------
    # Control socket (cli/up/control.py)

    async def _start_control_server(self) -> None:
        path = socket_path(self.layout.root)
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


# ---------------------------------------------------------------------------------------------
# Command line


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `ketch up` to the `ketch` command's subparsers."""
    up = subparsers.add_parser(
        "up",
        help="run a local cluster in the foreground",
        epilog=UP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_up_arguments(up)
    # cli.py dispatches on `handler`, the command modules' brief on `func`: either works.
    up.set_defaults(func=command, handler=command)


def command(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    if isinstance(options, str):
        for line in options.splitlines():
            print(f"ketch up: {line}", file=sys.stderr)
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
    control_socket = socket_path(layout.root)
    if len(os.fsencode(control_socket)) >= 100:  # sun_path holds 108 bytes on Linux
        print(f"ketch up: the data dir path is too long for {control_socket}", file=sys.stderr)
        return EXIT_USAGE
    if options.tls:
        _make_certificates(options, layout)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(Supervisor(options, console).run())


def _make_certificates(options: UpOptions, layout: Layout) -> None:
    """A new CA and one keystore per node (cli/up/certificates.py), replacing older ones."""
    # Imported here: only `ketch up --tls` needs the cryptography library.
    from cli.up.certificates import write_cluster_certificates

    controller, brokers = child_specs(options, layout)
    nodes = [controller.node, *(spec.node for spec in brokers)]
    write_cluster_certificates(
        truststore_path(layout), {node: keystore_path(layout, node) for node in nodes}
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ketch up",
        description="Run a local ketch cluster.",
        epilog=UP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_up_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return command(args)


if __name__ == "__main__":
    sys.exit(main())
