"""What `ketch produce` (cli/produce.py) and `ketch consume` (cli/consume.py) share: the topic
lookup both start with, the `-K`/`--key-separator` flag, and usage errors found after parsing
(flags that do not go together).

The topic is looked up with one Metadata request, so an unknown topic fails at once (exit 1)
instead of being retried until a timeout. Stateless.
"""

from __future__ import annotations

import argparse
import sys

from cli.common import EXIT_USAGE, UnknownTopicError, fetch_metadata
from cli.record_format import unescape
from client.client import Client
from wire.errors import ErrorCode, KafkaError


def add_key_separator_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "-K",
        "--key-separator",
        metavar="SEP",
        type=separator_arg,
        help=f"{what}; escapes such as \\t are understood",
    )


def separator_arg(text: str) -> str:
    """argparse `type=` for -K: kcat's escapes decoded (`-K '\\t'` is a tab); not empty."""
    try:
        separator = unescape(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not separator:
        raise argparse.ArgumentTypeError("the key separator cannot be empty")
    return separator


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """What `parser.error` prints (the command's usage, then the message), returned as exit code 2
    instead of raised as SystemExit, so a command's `main(argv)` returns it like argparse's own."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


async def partition_count(client: Client, topic: str) -> int:
    """The topic's partition count from one Metadata request; UnknownTopicError if absent."""
    response = await fetch_metadata(client, [topic])
    found = next((t for t in response.topics if t.name == topic), None)
    if found is None or found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise UnknownTopicError(topic)
    if found.error_code != ErrorCode.NONE:
        raise KafkaError(found.error_code, f"metadata of topic {topic!r}")
    return len(found.partitions)
