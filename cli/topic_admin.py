"""`ketch topic delete NAME [NAME ...]` and `ketch topic alter NAME`, and what the topic
commands say a refusal means.

    ketch topic delete orders
    ketch topic delete orders payments --bootstrap 127.0.0.1:9092
    ketch topic alter orders --partitions 6
    ketch topic alter orders --config retention.ms=3600000 --delete-config cleanup.policy

delete  sends one DeleteTopics for every NAME to the bootstrap broker, which forwards it to the
        controller (KIP-590). The controller answers at once, per topic: the topic is queued for
        deletion, the brokers stop serving it straight away and its replicas are deleted in the
        background (actors/controller/topic_deletion.py). So that `ketch topic delete t &&
        ketch topic describe t` says "unknown topic", the command then waits (bounded by
        DELETE_WAIT_S) until the bootstrap broker's metadata no longer lists the deleted topics;
        if that does not happen in time it says so on stderr and still exits 0 for them.
        Kafka's internal topics (__consumer_offsets, __transaction_state) are refused here, as
        kafka-topics.sh refuses them: deleting one loses every group's offsets or every
        transaction's state. Exit 1 when any NAME was not deleted (each is named with its error
        code and what to do), 0 when all were.

`refusal(action, topic, code, message)` is the one sentence every topic command prints for a
controller's refusal: the action, the topic, Kafka's error code name, the controller's words and,
for the codes a user can act on, what to do (`HINTS`).

alter   raises the topic's partition count (`--partitions`, the new total: CreatePartitions, the
        new partitions placed as CreateTopics places a topic's, with its replication factor)
        and changes its config overrides (`--config K=V` sets, `--delete-config K` removes:
        IncrementalAlterConfigs SET / DELETE), through the bootstrap broker, which forwards
        both to the controller (KIP-590). Everything is first sent with validate_only, so a
        refusal of any part changes nothing; then the configs, then the partitions. The running
        brokers apply a config change at once (no restart). Printed: each change made, the
        partitions as "before -> after". Like `create`, the command then waits (bounded by
        ALTER_WAIT_S) until the bootstrap broker's metadata lists every new partition with a
        leader, and says so on stderr if that takes longer. Exit 0 when everything was altered,
        1 when the cluster refused something (named with its error code and what to do), 2
        for bad flags (nothing to alter, or a key both set and deleted).

Registration: cli/topic.py's `register` calls `register_topic_commands(actions)` to add these
under `ketch topic`. Each command runs on its own event loop (cli/common.py); no state outlives it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Final

from cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    BootstrapServers,
    CliError,
    SubParsers,
    add_bootstrap_flag,
    error,
    fetch_metadata,
    open_client,
    positive_int_arg,
    run_async,
    set_command,
)
from client.client import Client
from client.errors import ClientError
from runtime.config import ConfigError, parse_override
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    AlterableConfig,
    AlterConfigsResource,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wire.messages.admin import RESOURCE_TOPIC
from wire.messages.alter import CONFIG_OPERATION_DELETE, CONFIG_OPERATION_SET
from wire.topic import INTERNAL_TOPICS, quoted_topic_name

PROG: Final = "ketch topic"
DELETE_WAIT_S: Final = 10.0
DELETE_POLL_S: Final = 0.05
DELETE_TIMEOUT_MS: Final = 30_000
ALTER_WAIT_S: Final = 10.0
ALTER_POLL_S: Final = 0.05
ALTER_TIMEOUT_MS: Final = 30_000
NO_LEADER: Final = -1

# What a user can do about a refusal, by Kafka's error code; a code not here is explained by the
# controller's own message alone.
HINTS: Final[dict[ErrorCode, str]] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "no such topic; `ketch topic list` shows the topics",
    ErrorCode.TOPIC_ALREADY_EXISTS: (
        "choose another name, or delete the topic first (`ketch topic delete NAME`); a deleted "
        "topic keeps its name until its replicas are gone"
    ),
    ErrorCode.INVALID_REPLICATION_FACTOR: (
        "give a smaller --replication-factor, or start the brokers that are down "
        "(`ketch cluster health` lists them)"
    ),
    ErrorCode.INVALID_PARTITIONS: "a topic's partitions can only be increased, and from 1",
    ErrorCode.INVALID_CONFIG: "fix or leave out that --config",
    ErrorCode.REQUEST_TIMED_OUT: (
        "the controller did not answer in time; `ketch cluster status` shows whether it is up"
    ),
    ErrorCode.NOT_CONTROLLER: "the controller is changing; try again in a moment",
}


def refusal(action: str, topic: str, code: ErrorCode, message: str | None) -> str:
    """'cannot ACTION topic NAME: CODE: the controller's words; what to do'."""
    said = f": {message}" if message else ""
    hint = HINTS.get(code)
    todo = f"; {hint}" if hint else ""
    return f"cannot {action} topic {quoted_topic_name(topic)}: {code.name}{said}{todo}"


# ---------------------------------------------------------------------------------------------
# argparse


def register_topic_commands(actions: SubParsers[argparse.ArgumentParser]) -> None:
    """Add `delete` and `alter` under an existing `ketch topic` parser."""
    delete = actions.add_parser(
        "delete",
        help="delete topics",
        description="Delete topics: each is gone from the brokers at once, its data soon after.",
        epilog=(
            "examples:\n"
            "  ketch topic delete events\n"
            "  ketch topic delete events prices --bootstrap 127.0.0.1:9093\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    delete.add_argument("names", nargs="+", metavar="NAME")
    add_bootstrap_flag(delete)
    set_command(delete, cmd_delete)

    alter = actions.add_parser(
        "alter",
        help="add partitions to a topic, or change its configs",
        # Line breaks of its own: the raw formatter (for the examples) does not wrap it.
        description=(
            "Raise a topic's partition count and set or delete its config overrides; the\n"
            "running brokers apply config changes at once. Nothing changes unless the\n"
            "cluster accepts every part."
        ),
        epilog=(
            "examples:\n"
            "  ketch topic alter orders --partitions 6\n"
            "  ketch topic alter orders --config retention.ms=3600000 \\\n"
            "      --config segment.bytes=104857600\n"
            "  ketch topic alter orders --delete-config retention.ms\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    alter.add_argument("name", metavar="NAME")
    alter.add_argument(
        "--partitions",
        type=positive_int_arg,
        metavar="P",
        help="the new partition count (more than the topic has; partitions cannot be removed)",
    )
    alter.add_argument(
        "--config",
        type=_config_arg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config override, e.g. retention.ms=3600000 (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a topic config override: the broker default applies again (repeatable)",
    )
    add_bootstrap_flag(alter)

    def alter_command(args: argparse.Namespace) -> int:
        problem = _alter_usage_problem(args)
        if problem is not None:
            alter.print_usage(sys.stderr)
            print(f"{alter.prog}: error: {problem}", file=sys.stderr, flush=True)
            return EXIT_USAGE
        return cmd_alter(args)

    set_command(alter, alter_command)


def _config_arg(text: str) -> tuple[str, str]:
    try:
        return parse_override(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _alter_usage_problem(args: argparse.Namespace) -> str | None:
    """Why the flags of `alter` cannot make one request, or None."""
    if args.partitions is None and not args.config and not args.delete_config:
        return "nothing to alter: give --partitions, --config or --delete-config"
    keys = [key for key, _ in args.config] + list(args.delete_config)
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        return f"each config key once: {', '.join(twice)} given more than once"
    return None


# ---------------------------------------------------------------------------------------------
# delete


def cmd_delete(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap
    names: list[str] = list(dict.fromkeys(args.names))  # once each, in the order given
    internal = [n for n in names if n in INTERNAL_TOPICS]
    for name in internal:
        error(
            PROG,
            f"cannot delete topic {name!r}: it is internal to the cluster (deleting it would "
            "lose every group's offsets or every transaction's state)",
        )
    wanted = [n for n in names if n not in INTERNAL_TOPICS]
    if not wanted:
        return EXIT_FAILED

    async def work() -> int:
        async with open_client(bootstrap) as client:
            results = await delete_topics(client, wanted)
            deleted = [r.name for r in results if r.error_code == ErrorCode.NONE]
            gone = await _wait_until_gone(client, deleted) if deleted else True
        failed = False
        for result in results:
            if result.error_code == ErrorCode.NONE:
                print(f"Deleted topic {result.name!r}.")
                continue
            failed = True
            code = ErrorCode.from_code(result.error_code)
            error(PROG, refusal("delete", result.name, code, result.error_message))
        if deleted and not gone:
            error(
                PROG,
                f"note: the bootstrap broker still listed {', '.join(deleted)} after "
                f"{DELETE_WAIT_S:.0f} s; the deletion goes on in the background",
            )
        return EXIT_FAILED if failed or internal else EXIT_OK

    return run_async(PROG, bootstrap, work)


async def delete_topics(client: Client, names: Sequence[str]) -> list[DeletableTopicResult]:
    """DeleteTopics through any broker: the controller's result for each of `names`, in their
    order (a name it did not answer for becomes an UNKNOWN_SERVER_ERROR result)."""
    request = DeleteTopicsRequest(topic_names=list(names), timeout_ms=DELETE_TIMEOUT_MS)
    response = await client.send_any(request)
    if not isinstance(response, DeleteTopicsResponse):
        raise TypeError(f"DeleteTopics answered with {type(response).__name__}")
    if response.error_code != ErrorCode.NONE:
        raise KafkaError(response.error_code, "DeleteTopics")
    by_name = {r.name: r for r in response.responses}
    return [
        by_name.get(
            name,
            DeletableTopicResult(
                name=name,
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                error_message="the cluster did not answer for it",
            ),
        )
        for name in names
    ]


async def _wait_until_gone(client: Client, names: Sequence[str]) -> bool:
    """Poll the bootstrap broker's metadata until it lists none of `names`."""
    deadline = time.monotonic() + DELETE_WAIT_S
    while True:
        try:
            response = await fetch_metadata(client, None)
            listed = {t.name for t in response.topics if t.error_code == ErrorCode.NONE}
            if listed.isdisjoint(names):
                return True
        except (ClientError, KafkaError):
            pass  # a broker busy applying the deletion: ask again until the deadline
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(DELETE_POLL_S)


# ---------------------------------------------------------------------------------------------
# alter


def cmd_alter(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap
    name: str = args.name
    settings: dict[str, str] = dict(args.config)
    deletions: list[str] = list(args.delete_config)
    partitions: int | None = args.partitions

    async def work() -> int:
        async with open_client(bootstrap) as client:
            before = await _partition_count(client, name)
            # Everything is checked before anything changes: a refused part changes nothing.
            for validate_only in (True, False):
                if settings or deletions:
                    await alter_configs(
                        client, name, settings, deletions, validate_only=validate_only
                    )
                if partitions is not None:
                    try:
                        await create_partitions(
                            client, name, partitions, validate_only=validate_only
                        )
                    except CliError as exc:
                        # Refused only now (the topic changed since the check): say what did
                        # change.
                        if validate_only or not (settings or deletions):
                            raise
                        raise CliError(f"{exc} (the config changes were made)") from None
            ready = partitions is None or await _wait_until_led(client, name, partitions)
        print(altered_message(name, before, partitions, settings, deletions))
        if not ready:
            error(
                PROG,
                f"note: not every new partition had a leader after {ALTER_WAIT_S:.0f} s; "
                f"see `ketch topic describe {name}`",
            )
        return EXIT_OK

    return run_async(PROG, bootstrap, work)


def altered_message(
    name: str,
    before: int,
    partitions: int | None,
    settings: dict[str, str],
    deletions: list[str],
) -> str:
    """What `alter` prints: one line per change made."""
    lines = [f"Altered topic {quoted_topic_name(name)}:"]
    if partitions is not None:
        lines.append(f"  partitions: {before} -> {partitions}")
    lines.extend(f"  set {key}={value}" for key, value in sorted(settings.items()))
    lines.extend(f"  deleted {key} (the broker default applies)" for key in sorted(deletions))
    return "\n".join(lines)


async def create_partitions(
    client: Client, name: str, count: int, *, validate_only: bool = False
) -> None:
    """CreatePartitions through any broker: `name` to `count` partitions in all, the new ones
    placed by the controller. A refusal raises CliError with the controller's words."""
    request = CreatePartitionsRequest(
        topics=[CreatePartitionsTopic(name=name, count=count)],
        timeout_ms=ALTER_TIMEOUT_MS,
        validate_only=validate_only,
    )
    response = await client.send_any(request)
    if not isinstance(response, CreatePartitionsResponse):
        raise TypeError(f"CreatePartitions answered with {type(response).__name__}")
    if response.error_code != ErrorCode.NONE:
        raise KafkaError(response.error_code, "CreatePartitions")
    result = next((r for r in response.results if r.name == name), None)
    if result is None:
        raise CliError(f"cannot alter topic {name!r}: the cluster did not answer for it")
    if result.error_code != ErrorCode.NONE:
        code = ErrorCode.from_code(result.error_code)
        raise CliError(refusal("alter", name, code, result.error_message))


async def alter_configs(
    client: Client,
    name: str,
    settings: dict[str, str],
    deletions: list[str],
    *,
    validate_only: bool = False,
) -> None:
    """IncrementalAlterConfigs through any broker: SET each of `settings`, DELETE each of
    `deletions`. A refusal raises CliError with the controller's words."""
    operations = [
        AlterableConfig(name=key, config_operation=CONFIG_OPERATION_SET, value=value)
        for key, value in sorted(settings.items())
    ]
    operations += [
        AlterableConfig(name=key, config_operation=CONFIG_OPERATION_DELETE) for key in deletions
    ]
    request = IncrementalAlterConfigsRequest(
        resources=[
            AlterConfigsResource(
                resource_type=RESOURCE_TOPIC, resource_name=name, configs=operations
            )
        ],
        validate_only=validate_only,
    )
    response = await client.send_any(request)
    if not isinstance(response, IncrementalAlterConfigsResponse):
        raise TypeError(f"IncrementalAlterConfigs answered with {type(response).__name__}")
    if response.error_code != ErrorCode.NONE:
        raise KafkaError(response.error_code, "IncrementalAlterConfigs")
    result = next((r for r in response.responses if r.resource_name == name), None)
    if result is None:
        raise CliError(f"cannot alter topic {name!r}: the cluster did not answer for it")
    if result.error_code != ErrorCode.NONE:
        code = ErrorCode.from_code(result.error_code)
        raise CliError(refusal("alter", name, code, result.error_message))


async def _partition_count(client: Client, name: str) -> int:
    response = await fetch_metadata(client, [name])
    topic = next((t for t in response.topics if t.name == name), None)
    if topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise CliError(refusal("alter", name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None))
    if topic.error_code != ErrorCode.NONE:
        raise KafkaError(topic.error_code, f"metadata of topic {name!r}")
    return len(topic.partitions)


async def _wait_until_led(client: Client, name: str, partitions: int) -> bool:
    """Poll the bootstrap broker's metadata until `name` has `partitions` partitions, each
    with a leader."""
    deadline = time.monotonic() + ALTER_WAIT_S
    while True:
        try:
            response = await fetch_metadata(client, [name])
            topic = next((t for t in response.topics if t.name == name), None)
            if (
                topic is not None
                and topic.error_code == ErrorCode.NONE
                and len(topic.partitions) == partitions
                and all(p.leader_id != NO_LEADER for p in topic.partitions)
            ):
                return True
        except (ClientError, KafkaError):
            pass  # a broker busy applying the change: ask again until the deadline
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(ALTER_POLL_S)
