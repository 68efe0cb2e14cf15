"""`ketch topic create | list | describe`: topic administration through any broker
(`delete` is cli/topic_admin.py's, registered here).

    ketch topic create NAME [--partitions P] [--replication-factor R] [--config k=v ...]
    ketch topic list [--json]
    ketch topic describe NAME [--json]
    ketch topic delete NAME [NAME ...]

    ketch topic create orders                      # the cluster's num.partitions and
                                                   # default.replication.factor
    ketch topic create orders --partitions 6 --replication-factor 3 --config retention.ms=3600000

create  sends CreateTopics to the bootstrap broker, which forwards it to the controller
        (KIP-590). Without --partitions or --replication-factor it sends -1, and the controller
        applies the cluster's num.partitions or default.replication.factor, as Kafka's does; the
        answer says what was created, and that is what is printed. An illegal name is refused
        before anything is sent, with the reason (wire/topic.py: length, the first character
        not allowed, "." or ".."), as a usage error (exit 2); a name with both '.' and '_'
        gets Kafka's warning on stderr and is created. The controller's answer is final, but
        the brokers learn the new partitions a moment later; so that `ketch topic create t &&
        ketch produce t` works, the command then waits (bounded by CREATE_WAIT_S) until the
        bootstrap broker's metadata lists every partition with a leader. If that does not
        happen in time it says so on stderr and still exits 0: the topic exists.
list    one Metadata request for every topic. `--json`: {"topics": [{"topic", "topic_id",
        "partitions", "replication_factor"}]} (a shape of ketch's own; DESIGN fixes none).
describe Metadata for the topic (leader, leader epoch, replicas, ISR per partition), then
        ListOffsets LATEST to each partition's leader: for a consumer that is the high
        watermark, the end of what consumers may read. A partition without a leader, or whose
        leader does not answer, shows `high_watermark` null. `--json` is DESIGN.md's shape:
        {"topic", "topic_id", "partitions": [{"partition", "leader" (-1 when none),
        "leader_epoch", "isr", "replicas", "offline_replicas", "high_watermark"}]}.

Topic ids are printed as Kafka prints them (URL-safe base64 without padding); null when unset.
Each command runs on its own event loop (cli/common.py); no state outlives it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rich.table import Table

from cli import topic_admin
from cli.common import (
    EXIT_OK,
    BootstrapServers,
    CliError,
    SubParsers,
    UnknownTopicError,
    add_bootstrap_flag,
    add_query_command,
    console,
    error,
    fetch_metadata,
    join_ids,
    open_client,
    positive_int_arg,
    print_json,
    run_argv,
    run_async,
    run_query,
    set_command,
)
from client.client import Client
from client.errors import ClientError
from runtime.config import ConfigError, parse_override
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    MetadataResponse,
    MetadataResponseTopic,
)
from wire.messages.data import LATEST_TIMESTAMP
from wire.topic import topic_id_text, topic_name_warning, validate_topic_name

PROG: Final = "ketch topic"
NO_LEADER: Final = -1
# CreateTopics' "use the cluster's default" for num_partitions and replication_factor.
CLUSTER_DEFAULT: Final = -1
CREATE_WAIT_S: Final = 10.0
CREATE_POLL_S: Final = 0.05
LIST_OFFSETS_TIMEOUT_MS: Final = 5_000


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    high_watermark: int | None
    # Replicas whose log directory failed on their broker (the controller keeps them out of the
    # ISR and of elections until that broker registers again).
    offline: tuple[int, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "replicas": list(self.replicas),
            "offline_replicas": list(self.offline),
            "high_watermark": self.high_watermark,
        }


@dataclass(frozen=True, slots=True)
class TopicDescription:
    topic: str
    topic_id: str | None
    partitions: tuple[PartitionDescription, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "topic_id": self.topic_id,
            "partitions": [p.to_json() for p in self.partitions],
        }


# ---------------------------------------------------------------------------------------------
# argparse


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    topic = subparsers.add_parser(
        "topic",
        help="create, list, describe, alter and delete topics",
        epilog=(
            "examples:\n"
            "  ketch topic create orders --partitions 3 --replication-factor 3\n"
            "  ketch topic list\n"
            "  ketch topic describe orders\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")

    create = actions.add_parser(
        "create",
        help="create a topic",
        epilog=(
            "examples:\n"
            "  ketch topic create events     # the cluster's num.partitions and RF\n"
            "  ketch topic create orders --partitions 3 --replication-factor 3 \\\n"
            "      --config min.insync.replicas=2\n"
            "  ketch topic create prices --replication-factor 3 \\\n"
            "      --config cleanup.policy=compact\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    create.add_argument("name", type=topic_name_arg, metavar="NAME")
    create.add_argument(
        "--partitions",
        type=positive_int_arg,
        metavar="P",
        help="partition count (default: the cluster's num.partitions)",
    )
    create.add_argument(
        "--replication-factor",
        type=positive_int_arg,
        metavar="R",
        help="replicas per partition (default: the cluster's default.replication.factor)",
    )
    create.add_argument(
        "--config",
        type=_topic_config_arg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config override, e.g. cleanup.policy=compact (repeatable)",
    )
    add_bootstrap_flag(create)
    set_command(create, cmd_create)

    listing = add_query_command(actions, "list", "list the topics", cmd_list)
    # add_query_command (cli/common.py) takes no epilog: set on the parser it returns.
    listing.epilog = (
        "examples:\n"
        "  ketch topic list\n"
        "  ketch topic list --json\n"
        "  ketch topic list --bootstrap 127.0.0.1:9093,127.0.0.1:9094\n"
    )
    listing.formatter_class = argparse.RawDescriptionHelpFormatter
    describe = add_query_command(
        actions,
        "describe",
        "leader, ISR, replicas and high watermark per partition",
        cmd_describe,
        positional=("name", "NAME"),
    )
    describe.epilog = (
        "examples:\n  ketch topic describe orders\n  ketch topic describe orders --json\n"
    )
    describe.formatter_class = argparse.RawDescriptionHelpFormatter
    topic_admin.register_topic_commands(actions)


def main(argv: Sequence[str]) -> int:
    """`ketch topic ...` without cli/main.py: `main(["topic", "list"])`."""
    return run_argv("ketch", register, argv)


def topic_name_arg(text: str) -> str:
    """argparse `type=` for a topic to create: an illegal name is a usage error, with why."""
    try:
        validate_topic_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _topic_config_arg(text: str) -> tuple[str, str]:
    try:
        return parse_override(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# create


def cmd_create(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap
    warning = topic_name_warning(args.name)
    if warning is not None:
        error(PROG, f"warning: {warning}")
    defaults = (
        ("num.partitions", args.partitions),
        ("default.replication.factor", args.replication_factor),
    )
    defaulted = [key for key, given in defaults if given is None]

    async def work() -> int:
        async with open_client(bootstrap) as client:
            result = await create_topic(
                client, args.name, args.partitions, args.replication_factor, dict(args.config)
            )
            partitions = _created_count(result.num_partitions, args.partitions)
            factor = _created_count(result.replication_factor, args.replication_factor)
            ready = await _wait_until_led(client, args.name, partitions)
        print(created_message(args.name, partitions, factor, defaulted=defaulted))
        if not ready:
            error(
                PROG,
                f"note: not every partition had a leader after {CREATE_WAIT_S:.0f} s; "
                f"see `ketch topic describe {args.name}`",
            )
        return EXIT_OK

    return run_async(PROG, bootstrap, work)


def created_message(name: str, partitions: int, factor: int, *, defaulted: Sequence[str]) -> str:
    """What `create` prints: the partitions and replication factor the controller used, and
    which of them came from the cluster's defaults."""
    source = f" (the cluster's {' and '.join(defaulted)})" if defaulted else ""
    return (
        f"Created topic {name!r}: {partitions} partition(s), replication factor {factor}{source}."
    )


def _created_count(answered: int, asked: int | None) -> int:
    # The controller's answer says what it used; -1 only from a server that does not say.
    if answered != CLUSTER_DEFAULT:
        return answered
    if asked is None:
        raise CliError("the cluster created the topic but did not say with how many partitions")
    return asked


def creatable_topic(
    name: str, partitions: int | None, replication_factor: int | None, configs: dict[str, str]
) -> CreatableTopic:
    """The CreateTopics entry; a count left None asks for the cluster's default (-1)."""
    return CreatableTopic(
        name=name,
        num_partitions=CLUSTER_DEFAULT if partitions is None else partitions,
        replication_factor=CLUSTER_DEFAULT if replication_factor is None else replication_factor,
        configs=[CreatableTopicConfig(name=k, value=v) for k, v in sorted(configs.items())],
    )


async def create_topic(
    client: Client,
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: dict[str, str],
) -> CreatableTopicResult:
    """CreateTopics through any broker; a count left None takes the cluster's default. The
    controller's result for the topic; a refusal raises CliError with the controller's words."""
    request = CreateTopicsRequest(
        topics=[creatable_topic(name, partitions, replication_factor, configs)]
    )
    response = await client.send_any(request)
    if not isinstance(response, CreateTopicsResponse):
        raise TypeError(f"CreateTopics answered with {type(response).__name__}")
    if response.error_code != ErrorCode.NONE:
        raise KafkaError(response.error_code, "CreateTopics")
    results = [t for t in response.topics if t.name == name]
    if not results:
        raise CliError(f"cannot create topic {name!r}: the cluster did not answer for it")
    result = results[0]
    if result.error_code != ErrorCode.NONE:
        code = ErrorCode.from_code(result.error_code)
        raise CliError(topic_admin.refusal("create", name, code, result.error_message))
    return result


async def _wait_until_led(client: Client, name: str, partitions: int) -> bool:
    """Poll the bootstrap broker's metadata until every partition of `name` has a leader."""
    deadline = time.monotonic() + CREATE_WAIT_S
    while True:
        try:
            response = await fetch_metadata(client, [name])
            topic = _find_topic(response, name)
            if (
                topic is not None
                and topic.error_code == ErrorCode.NONE
                and len(topic.partitions) == partitions
                and all(p.leader_id != NO_LEADER for p in topic.partitions)
            ):
                return True
        except (ClientError, KafkaError):
            pass  # a broker busy applying the new topic: ask again until the deadline
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(CREATE_POLL_S)


# ---------------------------------------------------------------------------------------------
# list


def cmd_list(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap

    async def work() -> int:
        async with open_client(bootstrap) as client:
            response = await fetch_metadata(client, None)
        topics = sorted(
            (t for t in response.topics if t.error_code == ErrorCode.NONE), key=lambda t: t.name
        )
        rows = [
            {
                "topic": t.name,
                "topic_id": topic_id_text(t.topic_id),
                "partitions": len(t.partitions),
                "replication_factor": max((len(p.replica_nodes) for p in t.partitions), default=0),
            }
            for t in topics
        ]
        if args.json:
            print_json({"topics": rows})
            return EXIT_OK
        if not rows:
            print("No topics.")
            return EXIT_OK
        table = Table("Topic", "Partitions", "Replication factor", "Topic id")
        for row in rows:
            table.add_row(
                str(row["topic"]),
                str(row["partitions"]),
                str(row["replication_factor"]),
                str(row["topic_id"] or "-"),
            )
        console().print(table)
        return EXIT_OK

    return run_async(PROG, bootstrap, work)


# ---------------------------------------------------------------------------------------------
# describe


def cmd_describe(args: argparse.Namespace) -> int:
    return run_query(
        PROG, args, lambda client: describe_topic(client, args.name), _print_description
    )


async def describe_topic(client: Client, name: str) -> TopicDescription:
    response = await fetch_metadata(client, [name])
    topic = _find_topic(response, name)
    if topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise UnknownTopicError(name)
    if topic.error_code != ErrorCode.NONE:
        raise KafkaError(topic.error_code, f"metadata of topic {name!r}")
    parts = sorted(topic.partitions, key=lambda p: p.partition_index)
    watermarks = await high_watermarks(client, response, name, leaders_of(response, name))
    return TopicDescription(
        topic=name,
        topic_id=topic_id_text(topic.topic_id),
        partitions=tuple(
            PartitionDescription(
                partition=p.partition_index,
                leader=p.leader_id,
                leader_epoch=p.leader_epoch,
                isr=tuple(p.isr_nodes),
                replicas=tuple(p.replica_nodes),
                high_watermark=watermarks.get(p.partition_index),
                offline=tuple(p.offline_replicas),
            )
            for p in parts
        ),
    )


def leaders_of(metadata: MetadataResponse, topic: str) -> dict[int, int]:
    """partition -> leader id (NO_LEADER when none) of `topic` in `metadata`; {} if absent."""
    found = _find_topic(metadata, topic)
    if found is None or found.error_code != ErrorCode.NONE:
        return {}
    return {p.partition_index: p.leader_id for p in found.partitions}


async def high_watermarks(
    client: Client, metadata: MetadataResponse, topic: str, leaders: dict[int, int]
) -> dict[int, int]:
    """partition -> HW from ListOffsets LATEST at each leader; partitions without an answer
    are absent (their HW is unknown, not an error of the whole command)."""
    brokers = {b.node_id: Address(b.host, b.port) for b in metadata.brokers}
    by_leader: dict[int, list[int]] = {}
    for partition, leader in leaders.items():
        if leader != NO_LEADER and leader in brokers:
            by_leader.setdefault(leader, []).append(partition)

    async def ask(leader: int, partitions: list[int]) -> dict[int, int]:
        request = ListOffsetsRequest(
            topics=[
                ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        ListOffsetsPartition(partition_index=p, timestamp=LATEST_TIMESTAMP)
                        for p in partitions
                    ],
                )
            ]
        )
        response = await client.send(brokers[leader], request, timeout_ms=LIST_OFFSETS_TIMEOUT_MS)
        if not isinstance(response, ListOffsetsResponse):
            return {}
        return {
            p.partition_index: p.offset
            for t in response.topics
            if t.name == topic
            for p in t.partitions
            if p.error_code == ErrorCode.NONE and p.offset >= 0
        }

    outcomes = await asyncio.gather(
        *(ask(leader, parts) for leader, parts in sorted(by_leader.items())),
        return_exceptions=True,
    )
    found: dict[int, int] = {}
    for outcome in outcomes:
        if isinstance(outcome, dict):
            found.update(outcome)
        elif not isinstance(outcome, ClientError | KafkaError):
            raise outcome  # a bug, not a broker that did not answer
    return found


def _find_topic(response: MetadataResponse, name: str) -> MetadataResponseTopic | None:
    return next((t for t in response.topics if t.name == name), None)


def _print_description(description: TopicDescription) -> None:
    out = console()
    count = len(description.partitions)
    out.print(f"Topic {description.topic}  id {description.topic_id or '-'}  {count} partition(s)")
    table = Table(
        "Partition", "Leader", "Leader epoch", "Replicas", "ISR", "Offline", "High watermark"
    )
    for p in description.partitions:
        leader = "none" if p.leader == NO_LEADER else str(p.leader)
        isr = join_ids(p.isr)
        if len(p.isr) < len(p.replicas):
            isr += " (under-replicated)"
        table.add_row(
            str(p.partition),
            leader,
            str(p.leader_epoch),
            join_ids(p.replicas),
            isr,
            join_ids(p.offline) or "-",
            "unknown" if p.high_watermark is None else str(p.high_watermark),
        )
    out.print(table)
