"""Consumer groups over ketch's native protocol, against a process cluster: the group APIs as a
client library would drive them (FindCoordinator, JoinGroup with MEMBER_ID_REQUIRED, SyncGroup,
Heartbeat, OffsetCommit, OffsetFetch, LeaveGroup), then a kill -9 of the coordinator: the old
connection fails, a broker that does not coordinate the group answers NOT_COORDINATOR, the
member finds the new coordinator, which has loaded the group (its members, generation and
committed offsets) from the offsets partition.

The processes run on the wall clock: every wait is a bounded poll of a condition; the children
are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final, TypeVar

import pytest
import pytest_asyncio

from cli import group as cli_group
from client.client import Client
from client.errors import ClientError
from runtime.net.transport import Address
from testkit.probes import partitions_of, wait_fully_replicated, wait_until
from testkit.processes import ProcessCluster, running_cluster

# Few offsets partitions and no initial rebalance delay, as for the Kafka clients' group tests.
from tests.integration.cluster_properties import CLUSTER_PROPERTIES, OFFSETS_PARTITIONS
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC, partition_for
from wire.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
    Response,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WAIT_S: Final = 30.0
SESSION_MS: Final = 6_000  # Kafka's group.min.session.timeout.ms: the shortest a group allows
GROUP: Final = "native-group"
TOPIC: Final = "orders"  # committed offsets need no topic: the coordinator does not check
R = TypeVar("R", bound=Response)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root: Path = tmp_path_factory.mktemp("native-groups")
    async with running_cluster(root, CLUSTER_PROPERTIES) as started:
        await started.wait_running(range(3), timeout_s=WAIT_S)
        yield started


class NativeMember:
    """One group member over the native protocol, remembering its coordinator."""

    def __init__(self, client: Client, cluster: ProcessCluster) -> None:
        self.client = client
        self.cluster = cluster
        self.coordinator: Address | None = None
        self.member_id = ""
        self.generation = -1

    async def find_coordinator(self) -> Address:
        async def found() -> bool:
            for address in self.cluster.addresses.values():
                try:
                    answer = await self.client.send(
                        address, FindCoordinatorRequest(coordinator_keys=[GROUP]), timeout_ms=1_000
                    )
                except ClientError:
                    continue  # a killed broker: ask another
                assert isinstance(answer, FindCoordinatorResponse)
                [coordinator] = answer.coordinators
                if coordinator.error_code == ErrorCode.NONE:
                    self.coordinator = Address(coordinator.host, coordinator.port)
                    return True
            return False

        await wait_until(found, "a group coordinator", timeout_s=WAIT_S)
        assert self.coordinator is not None
        return self.coordinator

    async def ask(self, request: Request, answer: type[R]) -> R:
        assert self.coordinator is not None
        response = await self.client.send(self.coordinator, request, timeout_ms=WAIT_S * 1_000)
        assert isinstance(response, answer), response
        return response

    def join_request(self) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=GROUP,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=10_000,
            member_id=self.member_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"subscription")],
        )

    async def join(self) -> JoinGroupResponse:
        """JoinGroup as a client does it: a new member first learns its id from
        MEMBER_ID_REQUIRED (KIP-394); a coordinator still loading is asked again."""
        answers: list[JoinGroupResponse] = []

        async def answered() -> bool:
            answers.append(await self.ask(self.join_request(), JoinGroupResponse))
            if answers[-1].error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = answers[-1].member_id
                return False
            if answers[-1].error_code == ErrorCode.NOT_COORDINATOR:
                # FindCoordinator may name a leader that has not heard of its leadership yet
                # (another broker's metadata was ahead): ask again, as a client does.
                await self.find_coordinator()
                return False
            return answers[-1].error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

        await wait_until(answered, "a join answer", timeout_s=WAIT_S)
        answer = answers[-1]
        assert answer.error_code == ErrorCode.NONE, ErrorCode.from_code(answer.error_code)
        self.member_id, self.generation = answer.member_id, answer.generation_id
        return answer

    async def sync(self, assignments: dict[str, bytes] | None = None) -> bytes:
        answer = await self.ask(
            SyncGroupRequest(
                group_id=GROUP,
                generation_id=self.generation,
                member_id=self.member_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[
                    SyncGroupRequestAssignment(member_id=m, assignment=a)
                    for m, a in (assignments or {}).items()
                ],
            ),
            SyncGroupResponse,
        )
        assert answer.error_code == ErrorCode.NONE, ErrorCode.from_code(answer.error_code)
        return answer.assignment

    async def heartbeat(self) -> ErrorCode:
        answer = await self.ask(
            HeartbeatRequest(
                group_id=GROUP, generation_id=self.generation, member_id=self.member_id
            ),
            HeartbeatResponse,
        )
        return ErrorCode.from_code(answer.error_code)

    async def commit(self, offsets: dict[int, int]) -> list[int]:
        answer = await self.ask(
            OffsetCommitRequest(
                group_id=GROUP,
                generation_id_or_member_epoch=self.generation,
                member_id=self.member_id,
                topics=[
                    OffsetCommitRequestTopic(
                        name=TOPIC,
                        partitions=[
                            OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                            for p, o in offsets.items()
                        ],
                    )
                ],
            ),
            OffsetCommitResponse,
        )
        return [p.error_code for t in answer.topics for p in t.partitions]


def committed_offsets(answer: OffsetFetchResponse) -> dict[int, int]:
    assert answer.error_code == ErrorCode.NONE, ErrorCode.from_code(answer.error_code)
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def ketch_group_describe(capsys: pytest.CaptureFixture[str], bootstrap: Address) -> tuple[int, Any]:
    """`ketch group describe GROUP --json`: (exit code, the JSON or stderr)."""
    code = cli_group.main(["group", "describe", GROUP, "--json", "--bootstrap", str(bootstrap)])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else err


async def test_a_group_over_the_native_protocol_survives_its_coordinators_death(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # One client (so one connection to the coordinator) per member, as with real consumers:
    # responses on a connection leave in request order, so a member's heartbeat must not queue
    # behind another member's JoinGroup, which waits for the rebalance.
    client, other_client = cluster.client(), cluster.client()
    try:
        a, b = NativeMember(client, cluster), NativeMember(other_client, cluster)
        await a.find_coordinator()
        await b.find_coordinator()
        first = await a.join()
        assert (first.generation_id, first.leader) == (1, a.member_id)
        assert await a.sync({a.member_id: b"all of it"}) == b"all of it"
        assert await a.heartbeat() is ErrorCode.NONE

        # A second member: its join waits for the rebalance, which `a` hears of in a heartbeat.
        b_join = await b.ask(b.join_request(), JoinGroupResponse)
        assert b_join.error_code == ErrorCode.MEMBER_ID_REQUIRED
        b.member_id = b_join.member_id
        b_joined = asyncio.ensure_future(b.ask(b.join_request(), JoinGroupResponse))

        async def told_to_rejoin() -> bool:
            return await a.heartbeat() is ErrorCode.REBALANCE_IN_PROGRESS

        await wait_until(told_to_rejoin, "a hears of the rebalance", timeout_s=WAIT_S)
        second = await a.join()
        b_answer = await asyncio.wait_for(b_joined, WAIT_S)
        assert second.generation_id == b_answer.generation_id == 2
        assert sorted(m.member_id for m in second.members) == sorted([a.member_id, b.member_id])
        b.generation = b_answer.generation_id
        b_sync = asyncio.ensure_future(b.sync())
        assert await a.sync({a.member_id: b"evens", b.member_id: b"odds"}) == b"evens"
        assert await asyncio.wait_for(b_sync, WAIT_S) == b"odds"
        assert await a.commit({0: 7, 1: 9}) == [0, 0]
        assert await b.commit({2: 4}) == [0]
        fetched = await a.ask(OffsetFetchRequest(group_id=GROUP), OffsetFetchResponse)
        assert committed_offsets(fetched) == {0: 7, 1: 9, 2: 4}

        offsets = await wait_fully_replicated(
            client, cluster.addresses.values(), OFFSETS_TOPIC, OFFSETS_PARTITIONS, timeout_s=WAIT_S
        )
        group_partition = offsets[partition_for(GROUP, OFFSETS_PARTITIONS)]
        # Kafka's offsets.topic.replication.factor (3) although the first FindCoordinator came
        # right after the brokers registered: a factor capped at the brokers alive then left
        # the group with one replica, and this test with no coordinator after the kill.
        assert sorted(group_partition.replica_nodes) == [0, 1, 2], group_partition
        coordinator_id = group_partition.leader_id
        assert cluster.addresses[coordinator_id] == a.coordinator
        await cluster.broker(coordinator_id).kill()
        with pytest.raises(ClientError):
            await a.heartbeat()  # the connection to the dead coordinator fails
        # `ketch group describe` at once, through a live broker: it rediscovers the coordinator
        # (FindCoordinator may name the dead one for a moment) and waits out the load.
        live = next(
            address for b_id, address in cluster.addresses.items() if b_id != coordinator_id
        )
        describing = asyncio.create_task(asyncio.to_thread(ketch_group_describe, capsys, live))

        # As a client does: rediscover on a failed connection or NOT_COORDINATOR (FindCoordinator
        # may still name the dead broker until the controller has moved the leadership), ask
        # again while the new coordinator loads.
        async def rediscovered() -> bool:
            try:
                code = await a.heartbeat()
            except ClientError:
                code = ErrorCode.NOT_COORDINATOR
            if code is ErrorCode.NOT_COORDINATOR:
                await a.find_coordinator()
                return False
            return code is not ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

        try:
            await wait_until(rediscovered, "the new coordinator, loaded", timeout_s=WAIT_S)
        except TimeoutError as exc:
            after = await partitions_of(client, [live], OFFSETS_TOPIC)
            raise TimeoutError(f"{exc}; {OFFSETS_TOPIC} now: {after}\n{cluster.logs()}") from None
        assert a.coordinator != cluster.addresses[coordinator_id]

        # A live broker that does not lead the group's partition says so.
        bystander = next(
            address
            for broker_id, address in cluster.addresses.items()
            if broker_id != coordinator_id and address != a.coordinator
        )
        refused = await client.send(
            bystander, OffsetFetchRequest(group_id=GROUP), timeout_ms=WAIT_S * 1_000
        )
        assert isinstance(refused, OffsetFetchResponse)
        assert refused.error_code == ErrorCode.NOT_COORDINATOR

        # The new coordinator loaded the group: the same generation and members, the offsets.
        assert await a.heartbeat() is ErrorCode.NONE
        b.coordinator = a.coordinator
        assert await b.heartbeat() is ErrorCode.NONE
        fetched = await a.ask(OffsetFetchRequest(group_id=GROUP), OffsetFetchResponse)
        assert committed_offsets(fetched) == {0: 7, 1: 9, 2: 4}, cluster.logs()
        code, described = await describing
        assert code == 0, described
        assert sorted(m["member_id"] for m in described["members"]) == sorted(
            [a.member_id, b.member_id]
        )
        assert {o["partition"]: o["committed_offset"] for o in described["offsets"]} == {
            0: 7,
            1: 9,
            2: 4,
        }
        assert await a.commit({0: 8}) == [0]

        left = await b.ask(
            LeaveGroupRequest(group_id=GROUP, members=[MemberIdentity(member_id=b.member_id)]),
            LeaveGroupResponse,
        )
        assert left.error_code == ErrorCode.NONE
        assert await a.heartbeat() is ErrorCode.REBALANCE_IN_PROGRESS

        await cluster.broker(coordinator_id).start()
        await wait_fully_replicated(
            client, cluster.addresses.values(), OFFSETS_TOPIC, OFFSETS_PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await client.close()
        await other_client.close()
