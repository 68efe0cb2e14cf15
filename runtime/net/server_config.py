"""The request server's settings (`ServerConfig`), read from a node's properties.

Each field is the snake_case form of the Kafka property named beside it. The limits here are what
keeps one client, or many, from taking a node's memory or connections: the largest frame, the
requests outstanding per connection, the bytes of requests in flight for the whole node
(runtime/net/request_pool.py), connections in total and per address, and how long an idle one
stays open. Immutable once built; validated when built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from runtime.net.request_pool import DEFAULT_QUEUED_MAX_REQUEST_BYTES
from runtime.properties import config_from_properties
from wire.frames import LENGTH_PREFIX_BYTES


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Server settings; each field is the snake_case form of the property named beside it."""

    # socket.request.max.bytes: largest request frame; a bigger one closes the connection.
    socket_request_max_bytes: int = 104_857_600
    # max.connections: accepted connections above this are closed at once.
    max_connections: int = 10_000
    # connections.max.idle.ms: close a connection idle (nothing read, nothing owed) this long.
    connections_max_idle_ms: int = 600_000
    # queued.max.requests: outstanding requests *per connection* before the server stops reading
    # it (Kafka's is one queue for the whole broker; per connection, one client cannot starve
    # the others).
    queued_max_requests: int = 500
    # server.shutdown.timeout.ms: how long stop() lets outstanding requests finish.
    server_shutdown_timeout_ms: int = 30_000
    # queued.max.request.bytes: bytes of requests being read or served, for all of a node's
    # listeners together (runtime/net/request_pool.py); Kafka's default is unbounded.
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    # max.connections.per.ip: connections from one address above this are closed at once
    # (Kafka's default is unbounded; a local cluster's nodes and clients share 127.0.0.1).
    max_connections_per_ip: int = 1_000
    # max.connections.per.ip.overrides: "host:count,host:count" (Kafka's format).
    max_connections_per_ip_overrides: str = ""

    def __post_init__(self) -> None:
        for name in (
            "socket_request_max_bytes",
            "max_connections",
            "connections_max_idle_ms",
            "queued_max_requests",
            "max_connections_per_ip",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.server_shutdown_timeout_ms < 0:
            raise ValueError("server_shutdown_timeout_ms must not be negative")
        if self.queued_max_request_bytes < self.socket_request_max_bytes + LENGTH_PREFIX_BYTES:
            raise ValueError(
                f"queued.max.request.bytes ({self.queued_max_request_bytes}) must hold the "
                f"largest request, socket.request.max.bytes ({self.socket_request_max_bytes}) "
                "plus its 4-byte length"
            )
        self.connection_limits()  # a malformed overrides list is refused now

    def connection_limits(self) -> dict[str, int]:
        """max.connections.per.ip.overrides as {host: limit}."""
        limits: dict[str, int] = {}
        for entry in filter(
            None, (e.strip() for e in self.max_connections_per_ip_overrides.split(","))
        ):
            host, sep, count = entry.rpartition(":")
            if not sep or not host or not count.isdigit():
                raise ValueError(
                    "max.connections.per.ip.overrides: expected host:count entries separated "
                    f"by commas, got {entry!r}"
                )
            limits[host.strip("[]")] = int(count)
        return limits

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> Self:
        """Read the server's settings from a node's property map; other keys are not ours.

        (A node's config file holds every component's properties; the node validates the set.)
        """
        return config_from_properties(cls, props)
