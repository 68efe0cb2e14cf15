"""`ketch group list` when brokers do not give their groups: the others are still listed, and
each silent broker is named with why (a fake client stands in for the cluster)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from cli import group as cli_group
from client.client import Client
from client.errors import ConnectionFailedError
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    ListedGroup,
    ListGroupsResponse,
    MetadataResponse,
    MetadataResponseBroker,
    Request,
    Response,
)

BROKERS = {
    0: Address("127.0.0.1", 9092),
    1: Address("127.0.0.1", 9093),
    2: Address("127.0.0.1", 9094),
}


class Cluster:
    """Broker 0 lists a group, broker 1 is loading for ever, broker 2 is unreachable."""

    async def send_any(self, request: Request, *, timeout_ms: float | None = None) -> Response:
        return MetadataResponse(
            brokers=[
                MetadataResponseBroker(node_id=b, host=a.host, port=a.port)
                for b, a in BROKERS.items()
            ]
        )

    async def send(
        self, target: Address, request: Request, *, timeout_ms: float | None = None
    ) -> Response:
        if target == BROKERS[0]:
            return ListGroupsResponse(
                groups=[ListedGroup(group_id="g", protocol_type="consumer", group_state="Stable")]
            )
        if target == BROKERS[1]:
            return ListGroupsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        raise ConnectionFailedError(f"cannot connect to {target}")


async def test_silent_brokers_are_named_and_the_others_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli_group, "GROUP_WAIT_S", 0.05)
    monkeypatch.setattr(cli_group, "RETRY_S", 0.01)
    rows, silent = await cli_group.list_groups(cast(Client, cast(Any, Cluster())))
    assert [(r.group, r.state, r.coordinator) for r in rows] == [("g", "Stable", 0)]
    assert [broker for broker, _ in silent] == [1, 2]
    assert "COORDINATOR_LOAD_IN_PROGRESS" in silent[0][1]
    assert "cannot connect" in silent[1][1]
