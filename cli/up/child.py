"""One node process as the `ketch up` supervisor keeps it: its state machine and the spawn-time
setup that ties it to the supervisor.

Each child's state is a small machine (`ChildState`, transition table `_TRANSITIONS`): DOWN ->
RUNNING on spawn; RUNNING -> STOPPING when asked to stop, -> BACKOFF when it died, -> DOWN when it
exited while a stop was under way; STOPPING -> DOWN when it exited; BACKOFF -> RUNNING on respawn,
-> DOWN when a stop arrives during the wait. An illegal change is a bug and asserts.

Ownership: a Child belongs to the supervisor's event loop (cli/up/supervisor.py says which of
its tasks change it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import signal
from dataclasses import dataclass, field
from typing import Final

from node.layout import NodeSpec

_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


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


@dataclass(slots=True)
class Child:
    spec: NodeSpec
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


def die_with_parent() -> None:
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
