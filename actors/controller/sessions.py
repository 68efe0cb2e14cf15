"""The controller's liveness table: which registered brokers are live, when each was last
heard from, and which of them are in a controlled shutdown.

ZooKeeper's ephemeral broker znodes are replaced by sessions: a broker is live from its
registration until it misses heartbeats for broker.session.timeout.ms or is fenced at the end of
its controlled shutdown (the rules are in actors/controller/liveness.py, which opens and closes
sessions). A live broker in controlled shutdown is no longer *eligible*: it may neither lead nor
join an ISR (KIP-841).

The table is kept in memory only: a restarted controller gives every broker its log says is
unfenced a fresh session (a grace period) rather than trusting heartbeat times from before.

Owner: the controller actor; it alone reads and changes the table, from its own task, so no lock
is needed. Pure: times are passed in (monotonic ms), nothing here reads a clock.
"""

from __future__ import annotations


class BrokerSessions:
    def __init__(self) -> None:
        # Live (registered, unfenced) brokers -> monotonic ms of their last heartbeat.
        self._last_heartbeat_ms: dict[int, int] = {}
        self._shutting_down: set[int] = set()

    def live(self) -> set[int]:
        return set(self._last_heartbeat_ms)

    def eligible(self) -> set[int]:
        """Brokers that may lead or join an ISR: live and not shutting down (KIP-841)."""
        return self.live() - self._shutting_down

    def shutting_down(self) -> set[int]:
        return set(self._shutting_down)

    def is_live(self, broker_id: int) -> bool:
        return broker_id in self._last_heartbeat_ms

    def is_shutting_down(self, broker_id: int) -> bool:
        return broker_id in self._shutting_down

    def open(self, broker_id: int, now_ms: int) -> None:
        """A session from now: the broker (re)registered, or the controller restarted."""
        self._last_heartbeat_ms[broker_id] = now_ms
        self._shutting_down.discard(broker_id)

    def heard_from(self, broker_id: int, now_ms: int) -> None:
        assert broker_id in self._last_heartbeat_ms, f"broker {broker_id} has no session"
        self._last_heartbeat_ms[broker_id] = now_ms

    def begin_shutdown(self, broker_id: int) -> None:
        assert broker_id in self._last_heartbeat_ms, f"broker {broker_id} has no session"
        self._shutting_down.add(broker_id)

    def close(self, broker_id: int) -> None:
        """The broker is fenced: no longer live, and no longer shutting down."""
        self._last_heartbeat_ms.pop(broker_id, None)
        self._shutting_down.discard(broker_id)

    def expired(self, now_ms: int, timeout_ms: int) -> list[int]:
        """The live brokers not heard from for longer than `timeout_ms`, in id order."""
        heartbeats = self._last_heartbeat_ms.items()
        return sorted(b for b, seen in heartbeats if now_ms - seen > timeout_ms)

    def state(self, broker_id: int) -> str:
        """As `ketch cluster status` shows it: "running", "shutting_down" or "fenced"."""
        if broker_id not in self._last_heartbeat_ms:
            return "fenced"
        if broker_id in self._shutting_down:
            return "shutting_down"
        return "running"
