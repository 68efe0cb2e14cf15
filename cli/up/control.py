"""The channel between `ketch cluster shutdown-broker|start-broker` and the `ketch up` supervisor.

The supervisor serves a unix socket at `<data-dir>/up.sock` (only while it runs). A command
connects, writes one JSON request on one line and reads one JSON reply on one line:

    request  {"command": "shutdown-broker" | "start-broker" | "ping", "broker": <id>}
    reply    {"ok": true|false, "exit_code": 0|1|2, "message": "..."}

The reply is sent when the action is done (the broker has exited after its controlled shutdown,
or the restarted broker has registered with the controller), so a script can run the next step
at once. `exit_code` follows the command line contract: 2 for an unknown broker id or a bad
request, 1 for an action that failed.

Why a socket and not signals plus marker files: a reply can say what happened (unknown id,
already stopped, did not register in time), the supervisor's state stays in its one process,
and the file's permissions (the data dir's owner) decide who may control the cluster. A socket
file left behind by a supervisor that was killed refuses connections; `ketch up` removes it when
it starts, and the commands report "no cluster running" for it.

Everything here is stateless encoding and one blocking round trip per command process.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SOCKET_NAME: Final = "up.sock"  # in the data dir, beside node/layout.py's files
EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2

SHUTDOWN_BROKER: Final = "shutdown-broker"
START_BROKER: Final = "start-broker"
PING: Final = "ping"
COMMANDS: Final = frozenset({SHUTDOWN_BROKER, START_BROKER, PING})

MAX_LINE_BYTES: Final = 64 * 1024  # a request or reply is a few dozen bytes; bound the read
# A controlled shutdown moves leadership first and a start waits for registration; both are
# bounded by the supervisor's own timeouts, this only bounds a supervisor that hangs.
REPLY_TIMEOUT_S: Final = 180.0


@dataclass(frozen=True, slots=True)
class ControlRequest:
    command: str
    broker: int | None = None

    def encode(self) -> bytes:
        return json.dumps({"command": self.command, "broker": self.broker}).encode() + b"\n"


@dataclass(frozen=True, slots=True)
class ControlReply:
    ok: bool
    exit_code: int
    message: str

    def encode(self) -> bytes:
        document = {"ok": self.ok, "exit_code": self.exit_code, "message": self.message}
        return json.dumps(document).encode() + b"\n"


def ok(message: str) -> ControlReply:
    return ControlReply(True, EXIT_OK, message)


def failed(message: str, exit_code: int = EXIT_FAILED) -> ControlReply:
    return ControlReply(False, exit_code, message)


def decode_request(line: bytes) -> ControlRequest | ControlReply:
    """The request, or the error reply for a malformed one."""
    try:
        document = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return failed("malformed request (expected one JSON object)", EXIT_USAGE)
    if not isinstance(document, dict):
        return failed("malformed request (expected one JSON object)", EXIT_USAGE)
    command = document.get("command")
    broker = document.get("broker")
    if command not in COMMANDS:
        return failed(f"unknown command {command!r}", EXIT_USAGE)
    if broker is not None and (not isinstance(broker, int) or isinstance(broker, bool)):
        return failed(f"broker id must be an integer, got {broker!r}", EXIT_USAGE)
    if command != PING and broker is None:
        return failed(f"{command} needs a broker id", EXIT_USAGE)
    return ControlRequest(str(command), broker)


def decode_reply(line: bytes) -> ControlReply:
    document = json.loads(line)
    if not isinstance(document, dict):
        raise ValueError(f"malformed reply: {line!r}")
    exit_code = document.get("exit_code")
    message = document.get("message")
    if not isinstance(exit_code, int) or not isinstance(message, str):
        raise ValueError(f"malformed reply: {line!r}")
    return ControlReply(bool(document.get("ok")), exit_code, message)


class NoSupervisorError(Exception):
    """No `ketch up` is serving the data dir's control socket."""


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


def call(
    data_dir: Path, request: ControlRequest, timeout_s: float = REPLY_TIMEOUT_S
) -> ControlReply:
    """One blocking round trip to the supervisor of `data_dir`."""
    path = socket_path(data_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
            raise NoSupervisorError(f"no `ketch up` cluster is running at {data_dir}") from exc
        sock.sendall(request.encode())
        received = bytearray()
        while not received.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
            if len(received) > MAX_LINE_BYTES:
                raise ValueError("reply too long")
    if not received:
        raise NoSupervisorError(f"the `ketch up` cluster at {data_dir} closed the connection")
    return decode_reply(bytes(received))


def supervisor_running(data_dir: Path) -> bool:
    """True when a live supervisor answers on the data dir's socket."""
    try:
        call(data_dir, ControlRequest(PING), timeout_s=5.0)
    except (NoSupervisorError, OSError, ValueError):
        return False
    return True
