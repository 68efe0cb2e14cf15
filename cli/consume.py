"""`ketch consume TOPIC`: print a topic's records, kcat style, from chosen partitions and offsets or
as a member of a consumer group that commits what it printed.

    ketch consume TOPIC [--from-beginning | --offset beginning|end|N|-N | --from-timestamp T]
                        [--format FMT | --json] [-K SEP] [--print-offsets] [--partition P]
                        [--group G] [--max-messages N] [--timeout-ms T]

Without --group every partition of the topic (or only --partition P) is assigned to a
client/consumer.py Consumer, starting at:
  --offset end (the default: only new records), --offset beginning (= --from-beginning);
  --offset N: offset N of each partition (kcat's absolute offset), kept within the partition's
      log (below its start: the start; past its end: the end);
  --offset -N: N records before the end of each partition (kcat's relative offset), or the
      start of a shorter log;
  --from-timestamp T (ms since the epoch, or an ISO-8601 date-time, local time without a zone):
      the first record at or after T by ListOffsets, the end where there is none.
With --group G the topic is consumed in group G (client/group_consumer.py: JoinGroup, the range
assignor, heartbeats, eager rebalances): each partition starts at the group's committed offset,
or where none is committed at the end (auto.offset.reset latest) or with --from-beginning /
--offset beginning at the start (earliest). What was printed is committed (OffsetCommit) every
auto.commit.interval.ms (5 s), before a rebalance gives a partition up, and on exit, which then
leaves the group (LeaveGroup). Each new assignment is announced on stderr. --partition,
--offset N|-N and --from-timestamp do not apply to a group (the group decides).

Output (cli/record_format.py): the value per line (a null value as `null`, undecodable bytes
replaced), with -K SEP `key<SEP>value`, with --print-offsets `partition<TAB>offset<TAB>` first;
--format FMT prints kcat's format tokens (%t %p %o %k %s %K %S %T %h %% and \\n \\t ...), --json
one JSON object per record.

Stops after --max-messages, or once --timeout-ms (default 10000) pass without a new record;
exits 0 either way, with the count on stderr. With --group it exits 1 when it never got into the
group, or when the offsets it printed could not be committed on exit. The command owns its loop,
client and consumer for its whole run (cli/common.py); nothing is shared, no locks.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from cli.common import (
    CLI_CLIENT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    BootstrapServers,
    CliError,
    SubParsers,
    add_bootstrap_flag,
    error,
    non_negative_int_arg,
    open_client,
    positive_int_arg,
    run_async,
    set_command,
)
from cli.data_common import add_key_separator_flag, partition_count, usage_error
from cli.record_format import RecordFormat, Render, line_format, record_json
from client.client import Client
from client.config import ConsumerConfig
from client.consumer import Consumer
from client.fetched_records import ConsumerRecord
from wire.topic import TopicPartition

if TYPE_CHECKING:
    from client.group_consumer import GroupConsumer

CONSUME_PROG: Final = "ketch consume"
DEFAULT_CONSUME_TIMEOUT_MS: Final = 10_000

_EPILOG: Final = """format tokens (kcat's):
  %t topic  %p partition  %o offset  %T timestamp (ms)  %k key  %s value (%v too)
  %K key size  %S value size (-1: null)  %h headers (name=value,...)  %% a percent sign
  \\n \\r \\t  newline, carriage return, tab   \\xHH  a character by its hex code
--json: {"topic", "partition", "offset", "timestamp", "key", "value", "headers": [{"key",
  "value"}]}; bytes that are not UTF-8 are in base64, with "key_encoding": "base64" (or value_).

examples:
  ketch consume orders --from-beginning --max-messages 10
  ketch consume orders --offset -5 --partition 0 --format '%p:%o %k=%s %h\\n'
  ketch consume orders --from-timestamp 2025-01-31T09:00:00 --json
  ketch consume orders --group billing -K ' => '     # commits what it printed
"""

StartKind = Literal["beginning", "end", "offset", "relative", "timestamp"]


@dataclass(frozen=True, slots=True)
class StartAt:
    """Where each partition starts: `value` is the offset (N), the count (-N) or the time (ms)."""

    kind: StartKind
    value: int = 0


BEGINNING: Final = StartAt("beginning")
END: Final = StartAt("end")


# ---------------------------------------------------------------------------------------------
# argparse


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    consume = subparsers.add_parser(
        "consume",
        help="print a topic's records (kcat -C, or -G with --group)",
        description="Print TOPIC's records, one per line (kcat -C; with --group, kcat -G).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    consume.add_argument("topic", metavar="TOPIC")
    start = consume.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="start at the log start (default: the end)"
    )
    start.add_argument(
        "--offset",
        type=offset_arg,
        metavar="WHERE",
        help="beginning | end | N (offset N) | -N (N before the end), per partition",
    )
    start.add_argument(
        "--from-timestamp",
        type=timestamp_arg,
        metavar="T",
        help="the first record at or after T: ms since the epoch, or 2025-01-31T09:00:00[Z]",
    )
    output = consume.add_mutually_exclusive_group()
    output.add_argument(
        "--format",
        type=format_arg,
        metavar="FMT",
        help="print each record as FMT, with kcat's tokens (below)",
    )
    output.add_argument("--json", action="store_true", help="one JSON object per record")
    add_key_separator_flag(consume, "print KEY<SEP>VALUE")
    consume.add_argument(
        "--print-offsets", action="store_true", help="print partition<TAB>offset<TAB> first"
    )
    consume.add_argument(
        "--partition", type=non_negative_int_arg, metavar="P", help="only partition P"
    )
    consume.add_argument(
        "--group", type=group_arg, metavar="G", help="consume as a member of group G, committing"
    )
    consume.add_argument(
        "--max-messages", type=positive_int_arg, metavar="N", help="stop after N records"
    )
    consume.add_argument(
        "--timeout-ms",
        type=non_negative_int_arg,
        default=DEFAULT_CONSUME_TIMEOUT_MS,
        metavar="T",
        help=f"stop after T ms without a new record (default {DEFAULT_CONSUME_TIMEOUT_MS})",
    )
    add_bootstrap_flag(consume)
    set_command(consume, lambda args: cmd_consume(args, consume))


def offset_arg(text: str) -> StartAt:
    """kcat's -o: beginning, end, N (absolute) or -N (relative to the end)."""
    if text in ("beginning", "end"):
        return BEGINNING if text == "beginning" else END
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not beginning, end, N or -N: {text!r}") from None
    if text.startswith("-"):
        if value == 0:
            raise argparse.ArgumentTypeError("-N counts back from the end: N must be at least 1")
        return StartAt("relative", -value)
    return StartAt("offset", value)


def timestamp_arg(text: str) -> StartAt:
    """ms since the epoch, or ISO 8601 (a zone such as Z or +01:00; without one, local time,
    as Kafka's tools read it)."""
    if text.isdigit():
        return StartAt("timestamp", int(text))
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not ms since the epoch nor a date-time such as 2025-01-31T09:00:00Z: {text!r}"
        ) from None
    return StartAt("timestamp", int(moment.timestamp() * 1000))


def format_arg(text: str) -> RecordFormat:
    try:
        return RecordFormat.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def group_arg(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("a group id must not be empty")
    return text


def start_at(args: argparse.Namespace) -> StartAt:
    chosen: StartAt | None = args.offset or args.from_timestamp
    return chosen or (BEGINNING if args.from_beginning else END)


def flag_conflict(args: argparse.Namespace) -> str | None:
    """What is wrong with these flags together, if anything (argparse checks them one by one)."""
    if args.group is not None:
        if args.partition is not None:
            return "--partition does not apply with --group: the group assigns the partitions"
        if start_at(args) not in (BEGINNING, END):
            return (
                "with --group a partition starts at the group's committed offset; only "
                "--from-beginning or --offset beginning|end say where none is committed"
            )
    if (args.format is not None or args.json) and (
        args.key_separator is not None or args.print_offsets
    ):
        chosen = "--format" if args.format is not None else "--json"
        return f"{chosen} says what to print: -K and --print-offsets do not apply"
    return None


def renderer(args: argparse.Namespace) -> Render:
    if args.json:
        return record_json
    if args.format is not None:
        format_: RecordFormat = args.format
        return format_.render
    return line_format(print_offsets=args.print_offsets, key_separator=args.key_separator)


# ---------------------------------------------------------------------------------------------
# the command


@dataclass(slots=True)
class ConsumeProgress:
    """How many records were printed; owned by the consume coroutine."""

    printed: int = 0


def cmd_consume(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    conflict = flag_conflict(args)
    if conflict is not None:
        return usage_error(parser, conflict)
    start = start_at(args)
    render = renderer(args)
    bootstrap: BootstrapServers = args.bootstrap

    async def work() -> int:
        async with open_client(bootstrap, client_id="ketch-consume") as client:
            count = await partition_count(client, args.topic)
            if args.group is not None:
                return await _consume_group(client, args, start, render)
            if args.partition is not None and args.partition >= count:
                raise CliError(
                    f"topic {args.topic!r} has no partition {args.partition} "
                    f"(it has {count}: 0..{count - 1})"
                )
            chosen = range(count) if args.partition is None else [args.partition]
            partitions = [TopicPartition(args.topic, p) for p in chosen]
            await _consume_assigned(client, args, partitions, start, render)
        return EXIT_OK

    return run_async(CONSUME_PROG, bootstrap, work)


async def _consume_assigned(
    client: Client,
    args: argparse.Namespace,
    partitions: Sequence[TopicPartition],
    start: StartAt,
    render: Render,
) -> None:
    reset = "earliest" if start == BEGINNING else "latest"
    consumer = Consumer(client, config=ConsumerConfig(auto_offset_reset=reset))
    progress = ConsumeProgress()
    try:
        consumer.assign(partitions)
        await seek_to_start(consumer, partitions, start)
        await consume_records(
            consumer.poll,
            render,
            progress,
            max_messages=args.max_messages,
            idle_timeout_ms=args.timeout_ms,
        )
    finally:
        # Also after Ctrl-C, the usual way to end a consume without --timeout-ms.
        _report_processed(progress)
        await consumer.close()


async def seek_to_start(
    consumer: Consumer, partitions: Sequence[TopicPartition], start: StartAt
) -> None:
    """Position each partition as `start` says (module docstring); beginning and end are left
    to the consumer's auto.offset.reset, resolved at its first poll."""
    if start.kind in ("beginning", "end"):
        return
    if start.kind == "timestamp":
        found = await consumer.offsets_for_times(dict.fromkeys(partitions, start.value))
        missing = [tp for tp, hit in found.items() if hit is None]
        for tp, hit in found.items():
            if hit is not None:
                consumer.seek(tp, hit.offset)
        if missing:
            consumer.seek_to_end(*missing)
        return
    firsts = await consumer.beginning_offsets(partitions)
    ends = await consumer.end_offsets(partitions)
    for tp in partitions:
        target = start.value if start.kind == "offset" else ends[tp] - start.value
        consumer.seek(tp, min(max(target, firsts[tp]), ends[tp]))


async def consume_records(
    poll: Callable[[float], Awaitable[list[ConsumerRecord]]],
    render: Render,
    progress: ConsumeProgress,
    *,
    max_messages: int | None,
    idle_timeout_ms: int,
    printed: Callable[[list[ConsumerRecord]], None] | None = None,
) -> None:
    """Print records until `max_messages`, or `idle_timeout_ms` without one; `printed` hears
    of each batch once it is out (the group marks them consumed).

    Every poll waits at most the idle timeout, and a poll that returns nothing means that
    much time passed without a record (polls return as soon as a fetch brings records).
    """
    out = sys.stdout
    while max_messages is None or progress.printed < max_messages:
        records = await poll(idle_timeout_ms)
        if not records:
            return
        if max_messages is not None:
            records = records[: max_messages - progress.printed]
        out.write("".join(render(r) for r in records))
        out.flush()  # a reader at the other end of a pipe sees each record as it arrives
        progress.printed += len(records)
        if printed is not None:
            printed(records)


def _report_processed(progress: ConsumeProgress) -> None:
    print(f"Processed a total of {progress.printed} message(s)", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# --group


async def _consume_group(
    client: Client, args: argparse.Namespace, start: StartAt, render: Render
) -> int:
    # Imported here: the group machinery (and kio, which reads the consumer protocol) is loaded
    # only by the command that uses it.
    from client.group_consumer import GroupConsumer
    from client.group_member import GroupConfig

    group: str = args.group
    generations: list[int] = []

    def announce(partitions: frozenset[TopicPartition], generation: int) -> None:
        generations.append(generation)
        owned = ", ".join(str(tp) for tp in sorted(partitions)) or "no partition"
        print(
            f"{CONSUME_PROG}: group {group!r} generation {generation}: reading {owned}",
            file=sys.stderr,
            flush=True,
        )

    consumer = GroupConsumer(
        client,
        [args.topic],
        # A command line user hears of an unreachable coordinator (and of a close that cannot
        # commit) within the CLI's request timeout, not Kafka's 30 s and 60 s.
        group=GroupConfig(
            group,
            request_timeout_ms=CLI_CLIENT_CONFIG.request_timeout_ms,
            default_api_timeout_ms=CLI_CLIENT_CONFIG.request_timeout_ms,
        ),
        config=ConsumerConfig(auto_offset_reset="earliest" if start == BEGINNING else "latest"),
        on_assigned=announce,
    )
    progress = ConsumeProgress()
    try:
        await consume_records(
            consumer.poll,
            render,
            progress,
            max_messages=args.max_messages,
            idle_timeout_ms=args.timeout_ms,
            printed=consumer.mark_consumed,
        )
    finally:
        _report_processed(progress)
        await consumer.close()
    if not generations:
        reason = consumer.member.last_error
        error(
            CONSUME_PROG,
            f"did not get into group {group!r} within {args.timeout_ms} ms"
            + ("" if reason is None else f": {reason}"),
        )
        return EXIT_FAILED
    return _commit_outcome(consumer)


def _commit_outcome(consumer: GroupConsumer) -> int:
    left = consumer.uncommitted()
    if not left:
        return EXIT_OK
    where = ", ".join(f"{tp} at {offset}" for tp, offset in sorted(left.items()))
    reason = consumer.last_commit_error or consumer.member.rejoin_reason or "not committed"
    error(
        CONSUME_PROG,
        f"could not commit what was printed ({where}): {reason}; the group's next member "
        "will read those records again",
    )
    return EXIT_FAILED
