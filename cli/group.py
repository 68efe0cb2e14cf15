"""`ketch group list | describe`: consumer groups, through any broker (`delete` and
`reset-offsets`, which change groups, are cli/group_admin.py's, registered here).

    ketch group list [--json]
    ketch group describe GROUP [--json]

list     ListGroups to every live broker (each lists the groups it coordinates, as in Kafka),
         merged. A broker that does not answer is named on stderr and the others are listed.
describe FindCoordinator for the group, then at the coordinator DescribeGroups (state,
         protocol, members with their subscriptions and assignments) and OffsetFetch (every
         committed offset); then ListOffsets LATEST at each partition's leader. For a consumer
         the latest offset is the high watermark, the end of what it may read, so the lag is
         high watermark - committed offset (Kafka's kafka-consumer-groups prints the same
         figure as LOG-END-OFFSET and LAG). A partition assigned but never committed shows no
         committed offset and no lag.

A coordinator that is moving or loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, or a coordinator that cannot be reached) is asked again,
rediscovering it, for up to GROUP_WAIT_S. A group the coordinator does not know (state Dead,
no committed offsets) is an error: "does not exist".

`--json` (a shape of ketch's own; DESIGN fixes none):
    list:     {"groups": [{"group", "state", "protocol_type", "coordinator"}]}
    describe: {"group", "state", "protocol_type", "protocol", "coordinator",
               "members": [{"member_id", "group_instance_id", "client_id", "host",
                            "subscription", "assignment": {topic: [partition]}}],
               "offsets": [{"topic", "partition", "committed_offset", "high_watermark",
                            "lag", "member_id"}]}
Member subscriptions and assignments are read only for protocol type "consumer"; for another
protocol they are null.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from rich.table import Table

from cli.common import (
    EXIT_OK,
    BootstrapServers,
    CliError,
    SubParsers,
    add_query_command,
    console,
    error,
    fetch_metadata,
    open_client,
    print_json,
    run_argv,
    run_async,
    run_query,
)
from cli.consumer_group_view import CONSUMER_GROUP_TYPE, ConsumerGroupView, consumer_group_view
from cli.topic import high_watermarks, leaders_of
from client.client import Client
from client.errors import ClientError, ConnectionFailedError, ConnectionLostError
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
    Response,
)

PROG: Final = "ketch group"
GROUP_WAIT_S: Final = 10.0
RETRY_S: Final = 0.1
REQUEST_TIMEOUT_MS: Final = 5_000
CONSUMER_PROTOCOL: Final = "consumer"
DEAD: Final = "Dead"
# The coordinator is moving, loading or not yet made: ask again (rediscovering it).
_RETRIABLE: Final = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
    }
)

T = TypeVar("T")


class _Retry(Exception):
    """An answer with a retriable coordinator error."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


# ---------------------------------------------------------------------------------------------
# What a description holds


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    subscription: tuple[str, ...] | None
    assignment: dict[str, tuple[int, ...]] | None

    def to_json(self) -> dict[str, object]:
        return {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "host": self.host,
            "subscription": None if self.subscription is None else list(self.subscription),
            "assignment": None
            if self.assignment is None
            else {topic: list(parts) for topic, parts in self.assignment.items()},
        }


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    topic: str
    partition: int
    committed_offset: int | None
    high_watermark: int | None
    member_id: str | None

    @property
    def lag(self) -> int | None:
        if self.committed_offset is None or self.high_watermark is None:
            return None
        return max(0, self.high_watermark - self.committed_offset)

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "committed_offset": self.committed_offset,
            "high_watermark": self.high_watermark,
            "lag": self.lag,
            "member_id": self.member_id,
        }


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: tuple[MemberDescription, ...]
    offsets: tuple[PartitionOffsets, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "group": self.group,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "coordinator": self.coordinator,
            "members": [m.to_json() for m in self.members],
            "offsets": [o.to_json() for o in self.offsets],
        }


@dataclass(frozen=True, slots=True)
class ListedGroupRow:
    group: str
    state: str
    protocol_type: str
    coordinator: int

    def to_json(self) -> dict[str, object]:
        return {
            "group": self.group,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "coordinator": self.coordinator,
        }


# ---------------------------------------------------------------------------------------------
# argparse


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser(
        "group",
        help="list, describe and delete consumer groups, reset their offsets",
        epilog=(
            "examples:\n"
            "  ketch group list\n"
            "  ketch group describe my-group\n"
            "  ketch group reset-offsets --group my-group --topic orders --to-earliest\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")

    listing = add_query_command(
        actions, "list", "list the consumer groups of every broker", cmd_list
    )
    # add_query_command (cli/common.py) takes no epilog: set on the parser it returns.
    listing.epilog = "examples:\n  ketch group list\n  ketch group list --json\n"
    listing.formatter_class = argparse.RawDescriptionHelpFormatter
    describe = add_query_command(
        actions,
        "describe",
        "state, members, assignments, committed offsets and lag of a group",
        cmd_describe,
        positional=("group", "GROUP"),
    )
    describe.epilog = (
        "examples:\n  ketch group describe my-group\n  ketch group describe my-group --json\n"
    )
    describe.formatter_class = argparse.RawDescriptionHelpFormatter
    # Imported here, not at the top: group_admin uses this module's coordinator helpers, so
    # this module must be whole before it loads.
    from cli import group_admin

    group_admin.register(actions)


def main(argv: Sequence[str]) -> int:
    """`ketch group ...` without cli/main.py: `main(["group", "list"])`."""
    return run_argv("ketch", register, argv)


# ---------------------------------------------------------------------------------------------
# list


def cmd_list(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap

    async def work() -> int:
        async with open_client(bootstrap) as client:
            rows, silent = await list_groups(client)
        for broker, reason in silent:
            error(PROG, f"note: broker {broker} did not list its groups ({reason})")
        if args.json:
            print_json({"groups": [r.to_json() for r in rows]})
            return EXIT_OK
        if not rows:
            print("No groups.")
            return EXIT_OK
        table = Table("Group", "State", "Protocol type", "Coordinator")
        for row in rows:
            table.add_row(row.group, row.state, row.protocol_type or "-", str(row.coordinator))
        console().print(table)
        return EXIT_OK

    return run_async(PROG, bootstrap, work)


async def list_groups(client: Client) -> tuple[list[ListedGroupRow], list[tuple[int, str]]]:
    """The groups of every broker in the metadata, and the brokers that did not answer (with
    why)."""
    metadata = await fetch_metadata(client, [])
    brokers = sorted((b.node_id, Address(b.host, b.port)) for b in metadata.brokers)

    async def attempt(address: Address) -> ListGroupsResponse:
        response = await client.send(address, ListGroupsRequest(), timeout_ms=REQUEST_TIMEOUT_MS)
        if not isinstance(response, ListGroupsResponse):
            raise TypeError(f"ListGroups answered with {type(response).__name__}")
        if response.error_code in _RETRIABLE:
            raise _Retry(ErrorCode.from_code(response.error_code))
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(response.error_code, "ListGroups")
        return response

    async def ask(address: Address) -> ListGroupsResponse:
        return await _retrying(lambda: attempt(address))

    outcomes = await asyncio.gather(
        *(ask(address) for _, address in brokers), return_exceptions=True
    )
    rows: list[ListedGroupRow] = []
    silent: list[tuple[int, str]] = []
    for (node_id, _), outcome in zip(brokers, outcomes, strict=True):
        if isinstance(outcome, ListGroupsResponse):
            rows.extend(
                ListedGroupRow(g.group_id, g.group_state, g.protocol_type, node_id)
                for g in outcome.groups
            )
        elif isinstance(outcome, ClientError | KafkaError | CliError):
            silent.append((node_id, str(outcome)))
        else:
            raise outcome  # a bug, not a broker that did not answer
    return sorted(rows, key=lambda r: r.group), silent


# ---------------------------------------------------------------------------------------------
# describe


def cmd_describe(args: argparse.Namespace) -> int:
    return run_query(
        PROG, args, lambda client: describe_group(client, args.group), _print_description
    )


async def describe_group(client: Client, group_id: str) -> GroupDescription:
    coordinator, described, committed, view = await _retrying(
        lambda: _ask_coordinator(client, group_id)
    )
    if described.group_state == DEAD and view is None and not committed:
        raise CliError(f"consumer group {group_id!r} does not exist")
    state, protocol_type, protocol = (
        (described.group_state, described.protocol_type, described.protocol_data)
        if view is None
        else (view.state, CONSUMER_GROUP_TYPE, view.assignor)
    )
    members = (
        tuple(_member(m, described.protocol_type) for m in described.members)
        if view is None
        else tuple(
            MemberDescription(
                m.member_id, m.instance_id, m.client_id, m.host, m.subscription, m.assignment
            )
            for m in view.members
        )
    )
    owners = {
        (topic, partition): m.member_id
        for m in members
        for topic, partitions in (m.assignment or {}).items()
        for partition in partitions
    }
    partitions = sorted(set(committed) | set(owners))
    watermarks = await _watermarks(client, sorted({topic for topic, _ in partitions}))
    return GroupDescription(
        group=group_id,
        state=state,
        protocol_type=protocol_type,
        protocol=protocol,
        coordinator=coordinator,
        members=members,
        offsets=tuple(
            PartitionOffsets(
                topic=topic,
                partition=partition,
                committed_offset=committed.get((topic, partition)),
                high_watermark=watermarks.get((topic, partition)),
                member_id=owners.get((topic, partition)),
            )
            for topic, partition in partitions
        ),
    )


async def _ask_coordinator(
    client: Client, group_id: str
) -> tuple[int, DescribedGroup, dict[tuple[str, int], int], ConsumerGroupView | None]:
    """One round: find the coordinator, describe the group there, fetch its offsets there. A
    group DescribeGroups calls Dead may be a KIP-848 group: ConsumerGroupDescribe then says."""
    found = await client.send_any(
        FindCoordinatorRequest(coordinator_keys=[group_id]), timeout_ms=REQUEST_TIMEOUT_MS
    )
    if not isinstance(found, FindCoordinatorResponse) or len(found.coordinators) != 1:
        raise TypeError(f"FindCoordinator answered with {found!r}")
    coordinator = found.coordinators[0]
    _check(coordinator.error_code, "FindCoordinator")
    address = Address(coordinator.host, coordinator.port)

    described = await _at_coordinator(client, address, DescribeGroupsRequest(groups=[group_id]))
    if not isinstance(described, DescribeGroupsResponse) or len(described.groups) != 1:
        raise TypeError(f"DescribeGroups answered with {described!r}")
    group = described.groups[0]
    _check(group.error_code, "DescribeGroups")
    view = None
    if group.group_state == DEAD:
        answer = await _at_coordinator(
            client, address, ConsumerGroupDescribeRequest(group_ids=[group_id])
        )
        if isinstance(answer, ConsumerGroupDescribeResponse):
            view = consumer_group_view(answer)

    fetched = await _at_coordinator(client, address, OffsetFetchRequest(group_id=group_id))
    if not isinstance(fetched, OffsetFetchResponse):
        raise TypeError(f"OffsetFetch answered with {type(fetched).__name__}")
    _check(fetched.error_code, "OffsetFetch")
    committed: dict[tuple[str, int], int] = {}
    for topic in fetched.topics:
        for p in topic.partitions:
            _check(p.error_code, f"OffsetFetch of {topic.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                committed[(topic.name, p.partition_index)] = p.committed_offset
    return coordinator.node_id, group, committed, view


async def _at_coordinator(client: Client, address: Address, request: Request) -> Response:
    """A request to the coordinator FindCoordinator named; one that cannot be reached (killed,
    and the cluster has not yet moved its partition's leadership) is looked up again."""
    try:
        return await client.send(address, request, timeout_ms=REQUEST_TIMEOUT_MS)
    except (ConnectionFailedError, ConnectionLostError):
        raise _Retry(ErrorCode.COORDINATOR_NOT_AVAILABLE) from None


def _check(code: int, what: str) -> None:
    if code == ErrorCode.NONE:
        return
    error_code = ErrorCode.from_code(code)
    if error_code in _RETRIABLE:
        raise _Retry(error_code)
    raise KafkaError(code, what)


async def _retrying(attempt: Callable[[], Awaitable[T]]) -> T:
    """`attempt()` again while the coordinator is moving or loading, up to GROUP_WAIT_S."""
    deadline = time.monotonic() + GROUP_WAIT_S
    while True:
        try:
            return await attempt()
        except _Retry as retry:
            if time.monotonic() >= deadline:
                raise CliError(
                    f"the group coordinator did not settle in {GROUP_WAIT_S:.0f} s "
                    f"({retry.code.name})"
                ) from None
        await asyncio.sleep(RETRY_S)


def _member(member: DescribedGroupMember, protocol_type: str) -> MemberDescription:
    # Imported here: it loads kio's schemas (~0.1 s), which only `group describe` needs.
    from wire.kafka.consumer_protocol import read_assignment, read_subscription

    consumer = protocol_type == CONSUMER_PROTOCOL
    return MemberDescription(
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
        client_id=member.client_id,
        host=member.client_host,
        subscription=read_subscription(member.member_metadata) if consumer else None,
        assignment=read_assignment(member.member_assignment) if consumer else None,
    )


async def _watermarks(client: Client, topics: list[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> high watermark, for the partitions whose leader answered."""
    if not topics:
        return {}
    metadata = await fetch_metadata(client, topics)
    found: dict[tuple[str, int], int] = {}
    for topic in topics:
        leaders = leaders_of(metadata, topic)
        if leaders:
            for partition, hw in (await high_watermarks(client, metadata, topic, leaders)).items():
                found[(topic, partition)] = hw
    return found


def _print_description(description: GroupDescription) -> None:
    out = console()
    protocol = (
        f"{description.protocol_type}/{description.protocol}"
        if description.protocol
        else description.protocol_type or "-"
    )
    out.print(
        f"Group {description.group}  state {description.state}  protocol {protocol}  "
        f"coordinator {description.coordinator}  {len(description.members)} member(s)"
    )
    if description.members:
        members = Table("Member id", "Client id", "Host", "Assignment")
        for m in description.members:
            members.add_row(m.member_id, m.client_id, m.host, _assignment_text(m.assignment))
        out.print(members)
    if description.offsets:
        offsets = Table("Topic", "Partition", "Committed", "High watermark", "Lag", "Member id")
        for o in description.offsets:
            offsets.add_row(
                o.topic,
                str(o.partition),
                _or_dash(o.committed_offset),
                _or_dash(o.high_watermark),
                _or_dash(o.lag),
                o.member_id or "-",
            )
        out.print(offsets)
    else:
        out.print("No committed offsets.")


def _assignment_text(assignment: dict[str, tuple[int, ...]] | None) -> str:
    if assignment is None:
        return "?"
    if not assignment:
        return "-"
    return " ".join(f"{topic}:{','.join(map(str, parts))}" for topic, parts in assignment.items())


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
