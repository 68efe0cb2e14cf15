"""The controller's liveness table: which registered brokers are live, when each was last
heard from, which of them are in a controlled shutdown, and which log dirs each reported failed
in its heartbeats (KRaft's OfflineLogDirs) and which of its replicas answered KAFKA_STORAGE_ERROR
(ZooKeeper-era Kafka's replicasOnOfflineDirs: not electable, shown as offline, until the broker
registers again; actors/controller/replica_failure.py fills both).

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

from collections.abc import Iterable

from wire.topic import TopicPartition


class BrokerSessions:
    def __init__(self) -> None:
        # Live (registered, unfenced) brokers -> monotonic ms of their last heartbeat.
        self._last_heartbeat_ms: dict[int, int] = {}
        self._shutting_down: set[int] = set()
        # Live brokers -> the ids of the log dirs their heartbeats reported offline.
        self._offline_dirs: dict[int, frozenset[bytes]] = {}
        # Live brokers -> their replicas in failed log dirs.
        self._offline_replicas: dict[int, set[TopicPartition]] = {}

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
        self._offline_dirs.pop(broker_id, None)
        self._offline_replicas.pop(broker_id, None)

    def is_replica_offline(self, broker_id: int, tp: TopicPartition) -> bool:
        return tp in self._offline_replicas.get(broker_id, ())

    def mark_replicas_offline(self, broker_id: int, tps: Iterable[TopicPartition]) -> None:
        assert broker_id in self._last_heartbeat_ms, f"broker {broker_id} has no session"
        self._offline_replicas.setdefault(broker_id, set()).update(tps)

    def offline_dirs(self, broker_id: int) -> frozenset[bytes]:
        return self._offline_dirs.get(broker_id, frozenset())

    def report_offline_dirs(self, broker_id: int, dirs: frozenset[bytes]) -> bool:
        """A heartbeat's offline dirs; True when one is new for this session. A dir never comes
        back within a session (only a restart, which registers again, brings it back)."""
        assert broker_id in self._last_heartbeat_ms, f"broker {broker_id} has no session"
        known = self.offline_dirs(broker_id)
        if dirs <= known:
            return False
        self._offline_dirs[broker_id] = known | dirs
        return True

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
        self._offline_dirs.pop(broker_id, None)
        self._offline_replicas.pop(broker_id, None)

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
