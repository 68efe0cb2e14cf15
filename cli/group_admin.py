"""`ketch group delete | reset-offsets`: the commands that change consumer groups (Kafka's
kafka-consumer-groups --delete and --reset-offsets, with its semantics).

    ketch group delete GROUP [GROUP...]
    ketch group reset-offsets --group G (--topic T[:P,...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --to-datetime ISO | --shift-by N)
        [--execute]

delete         FindCoordinator for the groups, then DeleteGroups at each coordinator (the
               groups it coordinates in one request). Only an empty group is deleted, with all
               its committed offsets. Each group's outcome is printed; the exit code is 1 when
               one was not deleted (unknown, still has members, ...).
reset-offsets  The partitions: every partition of each --topic T, or those named (T:0,2), or
               with --all-topics every partition the group has a committed offset for. The new
               offset of each: the log start offset (--to-earliest), the high watermark
               (--to-latest: the end of what a consumer reads), N (--to-offset), the first
               offset whose timestamp is at or after the time (--to-datetime, ISO 8601, local
               time unless it names a zone; the high watermark when no record is that late),
               or the committed offset plus N (--shift-by, N may be negative; a partition with
               nothing committed is an error). Every new offset is clamped to [log start, high
               watermark], with a note on stderr for each one clamped, as Kafka's tool warns.
               Only a group without active members (Empty, or not known to the coordinator)
               is reset, as in Kafka: a member's own commits would overwrite the reset. Without
               --execute the plan is only printed (a dry run, Kafka's default); with --execute
               the offsets are committed at the coordinator as a consumer outside the group,
               which the coordinator refuses (UNKNOWN_MEMBER_ID) if a member joined meanwhile.

Both commands find the coordinator and ask it again while it moves or loads, as `ketch group
describe` does (cli/group.py, whose helpers for that they share), for up to GROUP_WAIT_S.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from rich.table import Table

from cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    BootstrapServers,
    CliError,
    SubParsers,
    UnknownTopicError,
    add_bootstrap_flag,
    console,
    error,
    fetch_metadata,
    non_negative_int_arg,
    open_client,
    run_async,
    set_command,
)
from cli.group import (
    _RETRIABLE,
    DEAD,
    PROG,
    REQUEST_TIMEOUT_MS,
    _ask_coordinator,
    _at_coordinator,
    _check,
    _retrying,
)
from cli.topic import NO_LEADER, leaders_of
from client.client import Client
from client.errors import ConnectionFailedError, ConnectionLostError
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from wire.messages.data import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

DELETE_WAIT_S: Final = 10.0
RETRY_S: Final = 0.1
_NO_ANSWER: Final = ErrorCode.COORDINATOR_NOT_AVAILABLE
EMPTY: Final = "Empty"
# Why a group was not deleted, as a user should read it (other codes print their name).
_NOT_DELETED: Final = {
    ErrorCode.GROUP_ID_NOT_FOUND: "it does not exist",
    ErrorCode.NON_EMPTY_GROUP: "it has active members (stop its consumers first)",
    ErrorCode.INVALID_GROUP_ID: "the group id is not valid",
    ErrorCode.UNSTABLE_OFFSET_COMMIT: (
        "a transaction has offsets of it pending (try again once the transaction ends)"
    ),
}

TopicPartitions = tuple[str, tuple[int, ...] | None]  # a --topic: its name, and its partitions
ResetTarget = Literal["earliest", "latest", "offset", "datetime", "shift"]

# ---------------------------------------------------------------------------------------------
# argparse


def register(actions: SubParsers[argparse.ArgumentParser]) -> None:
    """Add `delete` and `reset-offsets` to `ketch group` (cli/group.py's `register` calls it)."""
    delete = actions.add_parser(
        "delete",
        help="delete empty consumer groups and their offsets",
        epilog=(
            "examples:\n"
            "  ketch group delete my-group             # no members left\n"
            "  ketch group delete my-group billing --bootstrap 127.0.0.1:9093\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    delete.add_argument("groups", nargs="+", type=group_id_arg, metavar="GROUP")
    add_bootstrap_flag(delete)
    set_command(delete, cmd_delete)

    reset = actions.add_parser(
        "reset-offsets",
        help="reset an inactive group's committed offsets (a dry run unless --execute)",
        epilog=(
            "examples:\n"
            "  ketch group reset-offsets --group my-group --topic orders --to-earliest\n"
            "  ketch group reset-offsets --group my-group --topic orders:0,1 \\\n"
            "      --to-offset 5 --execute\n"
            "  ketch group reset-offsets --group my-group --all-topics --shift-by -10\n"
            "  ketch group reset-offsets --group my-group --topic orders \\\n"
            "      --to-datetime 2025-01-31T09:00:00 --execute\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reset.add_argument("--group", required=True, type=group_id_arg, metavar="GROUP")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        dest="topics",
        action="append",
        type=topic_arg,
        metavar="TOPIC[:P,...]",
        help="a topic, all its partitions or those listed (repeatable)",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has committed"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the high watermark")
    target.add_argument("--to-offset", type=non_negative_int_arg, metavar="N", help="offset N")
    target.add_argument(
        "--to-datetime",
        type=datetime_arg,
        metavar="ISO",
        help="the first offset at or after this time (YYYY-MM-DDTHH:MM:SS[.sss][zone])",
    )
    target.add_argument(
        "--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be < 0)"
    )
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_bootstrap_flag(reset)
    set_command(reset, cmd_reset_offsets)


def group_id_arg(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("a group id must not be empty")
    return text


def topic_arg(text: str) -> TopicPartitions:
    """TOPIC or TOPIC:P,Q,... (Kafka's topic names cannot hold a colon)."""
    name, colon, listed = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"no topic name in {text!r}")
    if not colon:
        return name, None
    try:
        partitions = tuple(sorted({int(p) for p in listed.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"partitions must be numbers, as in {name}:0,1: {text!r}"
        ) from None
    if any(p < 0 for p in partitions):
        raise argparse.ArgumentTypeError(f"a partition is >= 0: {text!r}")
    return name, partitions


def datetime_arg(text: str) -> int:
    """ISO 8601 (Kafka's YYYY-MM-DDTHH:mm:SS.sss, with an optional zone: Z, +01:00) -> ms
    since the epoch; without a zone, local time (as Kafka's tool reads it)."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a date and time: {text!r} (use YYYY-MM-DDTHH:MM:SS[.sss], optionally with a "
            "zone such as Z or +01:00)"
        ) from None
    return int(moment.timestamp() * 1000)


# ---------------------------------------------------------------------------------------------
# delete


def cmd_delete(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap
    groups: list[str] = list(dict.fromkeys(args.groups))

    async def work() -> int:
        async with open_client(bootstrap) as client:
            outcome = await delete_groups(client, groups)
        failed = 0
        for group in groups:
            code = outcome[group]
            if code is ErrorCode.NONE:
                print(f"Deleted group {group!r} and its committed offsets.")
            else:
                failed += 1
                reason = _NOT_DELETED.get(code, code.name)
                if code in _RETRIABLE:
                    reason = f"its coordinator did not settle in {DELETE_WAIT_S:.0f} s ({reason})"
                error(PROG, f"group {group!r} was not deleted: {reason}")
        return EXIT_OK if not failed else EXIT_FAILED

    return run_async(PROG, bootstrap, work)


async def delete_groups(client: Client, groups: Sequence[str]) -> dict[str, ErrorCode]:
    """Each group's outcome. A group whose coordinator moves or loads is asked again (found
    anew) until DELETE_WAIT_S; past it, it keeps that retriable code."""
    outcome: dict[str, ErrorCode] = {}
    deadline = time.monotonic() + DELETE_WAIT_S
    while True:
        waiting = [g for g in groups if outcome.get(g, ErrorCode.NOT_COORDINATOR) in _RETRIABLE]
        if not waiting:
            return outcome
        outcome.update(await _delete_round(client, waiting))
        if time.monotonic() >= deadline:
            return outcome
        if any(outcome[g] in _RETRIABLE for g in waiting):
            await asyncio.sleep(RETRY_S)


async def _delete_round(client: Client, groups: Sequence[str]) -> dict[str, ErrorCode]:
    found = await client.send_any(
        FindCoordinatorRequest(coordinator_keys=list(groups)), timeout_ms=REQUEST_TIMEOUT_MS
    )
    if not isinstance(found, FindCoordinatorResponse):
        raise TypeError(f"FindCoordinator answered with {type(found).__name__}")
    # A group the answer leaves out (it should not) is asked again, as a moving coordinator.
    top = ErrorCode.from_code(found.error_code)
    unanswered: ErrorCode = top if top is not ErrorCode.NONE else _NO_ANSWER
    outcome = dict.fromkeys(groups, unanswered)
    at: dict[Address, list[str]] = {}
    for coordinator in found.coordinators:
        if coordinator.error_code == ErrorCode.NONE:
            at.setdefault(Address(coordinator.host, coordinator.port), []).append(coordinator.key)
        else:
            outcome[coordinator.key] = ErrorCode.from_code(coordinator.error_code)

    async def delete_at(address: Address, names: list[str]) -> dict[str, ErrorCode]:
        try:
            answer = await client.send(
                address, DeleteGroupsRequest(groups_names=names), timeout_ms=REQUEST_TIMEOUT_MS
            )
        except (ConnectionFailedError, ConnectionLostError):
            return dict.fromkeys(names, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not isinstance(answer, DeleteGroupsResponse):
            raise TypeError(f"DeleteGroups answered with {type(answer).__name__}")
        codes = dict.fromkeys(names, ErrorCode.from_code(answer.error_code))
        codes.update({r.group_id: ErrorCode.from_code(r.error_code) for r in answer.results})
        return codes

    for codes in await asyncio.gather(*(delete_at(a, names) for a, names in at.items())):
        outcome.update(codes)
    return outcome


# ---------------------------------------------------------------------------------------------
# reset-offsets


@dataclass(frozen=True, slots=True)
class ResetRow:
    topic: str
    partition: int
    current: int | None  # the committed offset, None when nothing is committed
    new: int


@dataclass(frozen=True, slots=True)
class ResetSpec:
    group: str
    topics: tuple[TopicPartitions, ...] | None  # None: --all-topics
    to: ResetTarget
    value: int = 0  # the offset, the time in ms, or the shift


def _spec(args: argparse.Namespace) -> ResetSpec:
    topics = None if args.all_topics else tuple(args.topics)
    valued: tuple[tuple[ResetTarget, int | None], ...] = (
        ("offset", args.to_offset),
        ("datetime", args.to_datetime),
        ("shift", args.shift_by),
    )
    for to, value in valued:
        if value is not None:
            return ResetSpec(args.group, topics, to, value)
    return ResetSpec(args.group, topics, "earliest" if args.to_earliest else "latest")


def cmd_reset_offsets(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap
    spec = _spec(args)

    async def work() -> int:
        async with open_client(bootstrap) as client:
            rows, clamped = await plan_reset(client, spec)
            for note in clamped:
                error(PROG, f"note: {note}")
            if args.execute:
                await commit_reset(client, spec.group, rows)
        _print_plan(spec.group, rows, executed=args.execute)
        return EXIT_OK

    return run_async(PROG, bootstrap, work)


async def plan_reset(client: Client, spec: ResetSpec) -> tuple[list[ResetRow], list[str]]:
    """The new offset of each partition, and a note for each one clamped into the log.
    Raises CliError for a group with active members, an unknown topic or partition, a shift
    of a partition with nothing committed, or a partition whose offsets cannot be read."""
    _, described, committed, view = await _retrying(lambda: _ask_coordinator(client, spec.group))
    state, members = described.group_state, len(described.members)
    if view is not None:  # a KIP-848 group, which DescribeGroups calls Dead
        state, members = view.state, len(view.members)
    if state not in (EMPTY, DEAD) or members:
        raise CliError(
            f"cannot reset the offsets of group {spec.group!r}: it is {state} "
            f"with {members} active member(s); stop its consumers first"
        )
    partitions = await _partitions(client, spec, committed)
    metadata = await fetch_metadata(client, sorted({t for t, _ in partitions}))
    earliest = await _list_offsets(client, metadata, partitions, EARLIEST_TIMESTAMP)
    latest = await _list_offsets(client, metadata, partitions, LATEST_TIMESTAMP)
    at_time = {}
    if spec.to == "datetime":
        at_time = await _list_offsets(client, metadata, partitions, spec.value)
    rows: list[ResetRow] = []
    clamped: list[str] = []
    for tp in partitions:
        current = committed.get(tp)
        wanted = _wanted(spec, tp, current, earliest[tp], latest[tp], at_time.get(tp))
        new = min(max(wanted, earliest[tp]), latest[tp])
        if new != wanted:
            edge = "log start offset" if new == earliest[tp] else "high watermark"
            clamped.append(
                f"{tp[0]}-{tp[1]}: offset {wanted} is outside the log "
                f"[{earliest[tp]}, {latest[tp]}]; using the {edge}, {new}"
            )
        rows.append(ResetRow(tp[0], tp[1], current, new))
    return rows, clamped


def _wanted(
    spec: ResetSpec,
    tp: tuple[str, int],
    current: int | None,
    earliest: int,
    latest: int,
    at_time: int | None,
) -> int:
    if spec.to == "earliest":
        return earliest
    if spec.to == "latest":
        return latest
    if spec.to == "offset":
        return spec.value
    if spec.to == "datetime":
        # No record that late: the end of the log (Kafka's tool does the same).
        return latest if at_time is None or at_time < 0 else at_time
    if current is None:
        raise CliError(
            f"cannot shift {tp[0]}-{tp[1]}: group {spec.group!r} has no committed offset there"
        )
    return current + spec.value


async def _partitions(
    client: Client, spec: ResetSpec, committed: dict[tuple[str, int], int]
) -> list[tuple[str, int]]:
    if spec.topics is None:
        if not committed:
            raise CliError(
                f"group {spec.group!r} has no committed offsets: name the topics with --topic"
            )
        return sorted(committed)
    names = sorted({name for name, _ in spec.topics})
    metadata = await fetch_metadata(client, names)
    chosen: set[tuple[str, int]] = set()
    for name, listed in spec.topics:
        leaders = leaders_of(metadata, name)
        if not leaders:
            raise UnknownTopicError(name)
        missing = sorted(set(listed or ()) - set(leaders))
        if missing:
            raise CliError(
                f"topic {name!r} has no partition {', '.join(map(str, missing))} "
                f"(it has {len(leaders)})"
            )
        chosen.update((name, p) for p in (listed if listed is not None else leaders))
    return sorted(chosen)


async def _list_offsets(
    client: Client,
    metadata: MetadataResponse,
    partitions: Sequence[tuple[str, int]],
    timestamp: int,
) -> dict[tuple[str, int], int]:
    """ListOffsets at each partition's leader: the offset for `timestamp` (EARLIEST, LATEST, or
    a time in ms, for which -1 means no record that late)."""
    brokers = {b.node_id: Address(b.host, b.port) for b in metadata.brokers}
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for topic, partition in partitions:
        leader = leaders_of(metadata, topic).get(partition, NO_LEADER)
        if leader == NO_LEADER or leader not in brokers:
            raise CliError(f"{topic}-{partition} has no leader now; try again shortly")
        by_leader.setdefault(leader, []).append((topic, partition))

    async def ask(leader: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        topics: dict[str, list[ListOffsetsPartition]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(
                ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
            )
        request = ListOffsetsRequest(
            topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()]
        )
        answer = await client.send(brokers[leader], request, timeout_ms=REQUEST_TIMEOUT_MS)
        if not isinstance(answer, ListOffsetsResponse):
            raise TypeError(f"ListOffsets answered with {type(answer).__name__}")
        found: dict[tuple[str, int], int] = {}
        for topic_answer in answer.topics:
            for p in topic_answer.partitions:
                if p.error_code != ErrorCode.NONE:
                    code = ErrorCode.from_code(p.error_code)
                    raise CliError(
                        f"cannot read the offsets of {topic_answer.name}-{p.partition_index}: "
                        f"{code.name}; try again shortly"
                    )
                found[(topic_answer.name, p.partition_index)] = p.offset
        absent = [tp for tp in tps if tp not in found]
        if absent:
            raise CliError(f"broker {leader} did not answer for {absent[0][0]}-{absent[0][1]}")
        return found

    offsets: dict[tuple[str, int], int] = {}
    for answered in await asyncio.gather(*(ask(b, tps) for b, tps in by_leader.items())):
        offsets.update(answered)
    return offsets


async def commit_reset(client: Client, group: str, rows: Sequence[ResetRow]) -> None:
    """Commit the new offsets at the group's coordinator, as a consumer outside the group."""
    topics: dict[str, list[OffsetCommitRequestPartition]] = {}
    for row in rows:
        topics.setdefault(row.topic, []).append(
            OffsetCommitRequestPartition(partition_index=row.partition, committed_offset=row.new)
        )
    request = OffsetCommitRequest(
        group_id=group,
        topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )

    async def attempt() -> None:
        found = await client.send_any(
            FindCoordinatorRequest(coordinator_keys=[group]), timeout_ms=REQUEST_TIMEOUT_MS
        )
        if not isinstance(found, FindCoordinatorResponse) or len(found.coordinators) != 1:
            raise TypeError(f"FindCoordinator answered with {found!r}")
        coordinator = found.coordinators[0]
        _check(coordinator.error_code, "FindCoordinator")
        address = Address(coordinator.host, coordinator.port)
        answer = await _at_coordinator(client, address, request)
        if not isinstance(answer, OffsetCommitResponse):
            raise TypeError(f"OffsetCommit answered with {type(answer).__name__}")
        codes = {p.error_code for t in answer.topics for p in t.partitions} | {answer.error_code}
        codes.discard(ErrorCode.NONE)
        if ErrorCode.UNKNOWN_MEMBER_ID in codes:
            raise CliError(
                f"group {group!r} has active members now (one joined while resetting): "
                "nothing was committed; stop its consumers and try again"
            )
        for code in codes:
            _check(code, "OffsetCommit")

    await _retrying(attempt)


def _print_plan(group: str, rows: Sequence[ResetRow], *, executed: bool) -> None:
    out = console()
    table = Table("Topic", "Partition", "Current offset", "New offset")
    for row in rows:
        current = "-" if row.current is None else str(row.current)
        table.add_row(row.topic, str(row.partition), current, str(row.new))
    out.print(table)
    if executed:
        out.print(f"Committed the new offsets of {len(rows)} partition(s) for group {group}.")
    else:
        out.print(f"Dry run: nothing committed for group {group} (add --execute to commit).")
