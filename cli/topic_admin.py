"""`ketch topic delete NAME [NAME ...]`, and what the topic commands say a refusal means.

    ketch topic delete orders
    ketch topic delete orders payments --bootstrap 127.0.0.1:9092

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

`topic alter` is not here: it needs CreatePartitions and IncrementalAlterConfigs, which neither
the brokers nor the controller serve yet.

Registration: cli/topic.py's `register` calls `register_topic_commands(actions)` to add these
under `ketch topic`. Each command runs on its own event loop (cli/common.py); no state outlives it.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Final

from cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    BootstrapServers,
    SubParsers,
    add_bootstrap_flag,
    error,
    fetch_metadata,
    open_client,
    run_async,
    set_command,
)
from client.client import Client
from client.errors import ClientError
from wire.errors import ErrorCode, KafkaError
from wire.group_records import OFFSETS_TOPIC
from wire.messages import DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse
from wire.topic import quoted_topic_name
from wire.transaction_log import TRANSACTION_STATE_TOPIC

PROG: Final = "ketch topic"
DELETE_WAIT_S: Final = 10.0
DELETE_POLL_S: Final = 0.05
DELETE_TIMEOUT_MS: Final = 30_000
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

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
    """Add `delete` under an existing `ketch topic` parser."""
    delete = actions.add_parser(
        "delete",
        help="delete topics",
        description="Delete topics: each is gone from the brokers at once, its data soon after.",
        epilog="example: ketch topic delete orders payments",
    )
    delete.add_argument("names", nargs="+", metavar="NAME")
    add_bootstrap_flag(delete)
    set_command(delete, cmd_delete)


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
