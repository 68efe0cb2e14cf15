"""`ketch produce TOPIC`: stdin's lines, or generated records, to a topic over the native Producer,
with kcat's producer flags.

    ketch produce TOPIC [-K SEP] [--partition P] [--header K=V]... [--acks 0|1|all]
                        [--compression none|gzip|snappy|lz4|zstd] [--linger-ms MS]
                        [--batch-size B] [--count N] [--rate R] [--size B]

Input. Each line of stdin is a record (the line end is not part of the value; an empty line is an
empty value), read by cli/line_reader.py's thread. With -K SEP each line is `key<SEP>value`,
split at the first SEP; a line without SEP is reported and not sent. With --size B (and
--count N) stdin is not read: N records are generated, record i's value its number padded
with 'x' to B bytes, null keys (load generation, as `ketch bench` does with its own client).

Records. --partition P sends every record to P (else the default partitioner: murmur2 of the key,
sticky for null keys); each --header K=V is on every record (`K` alone: a null value, as kcat's
-H); --compression is Kafka's compression.type, the codec of every batch; --linger-ms and
--batch-size are linger.ms and batch.size; --acks 0|1|all (default all).

Load. --count N stops after N records (lines read, or records generated). --rate R sends at most
R records per second on a fixed schedule (`RatePacer`: record n is sent n/R seconds after the
first, so a stall is made up for by sending the late records at once).

The exit code is 0 only when every record was acknowledged at the requested acks (acks=0:
written to the socket), else 1 with the first failures on stderr; the summary line says how many
were. At most MAX_PENDING records wait for their acknowledgement at a time, so a large input
does not grow memory without bound. The command owns its loop, client and producer for its
whole run (cli/common.py); nothing is shared, no locks.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import BinaryIO, Final, TextIO

from cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    BootstrapServers,
    CliError,
    SubParsers,
    add_bootstrap_flag,
    describe_error,
    error,
    non_negative_int_arg,
    open_client,
    positive_int_arg,
    run_async,
    set_command,
)
from cli.data_common import add_key_separator_flag, partition_count, usage_error
from cli.line_reader import LineReader
from client.accumulator import RecordMetadata
from client.config import ACKS_ALL, ProducerConfig
from client.producer import Producer
from runtime.clock import NS_PER_MS, Clock
from wire.errors import KafkaError
from wire.records import CompressionType

PRODUCE_PROG: Final = "ketch produce"
MAX_PENDING: Final = 10_000  # records awaiting acknowledgement before reading more input
MAX_REPORTED_FAILURES: Final = 10  # the rest are counted, not printed one by one
ACKS_CHOICES: Final = {"0": 0, "1": 1, "all": ACKS_ALL, "-1": ACKS_ALL}
COMPRESSION_CHOICES: Final = {
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
_DEFAULTS: Final = ProducerConfig()

# The CLI's producer: Kafka's defaults, except that a command line user should hear about a
# record that cannot be delivered within seconds, not after Kafka's two minutes.
_PRODUCER_DELIVERY_TIMEOUT_MS: Final = 30_000
_PRODUCER_REQUEST_TIMEOUT_MS: Final = 15_000
_PRODUCER_MAX_BLOCK_MS: Final = 15_000

_EXAMPLES: Final = """examples:
  printf 'k1:hello\\nk2:world\\n' | ketch produce orders -K :
  echo hi | ketch produce orders --partition 0 --header source=cli
  echo hi | ketch produce orders --compression zstd --delivery-timeout-ms 5000
  ketch produce orders --count 100000 --size 512 --rate 5000 --acks 1
"""


# ---------------------------------------------------------------------------------------------
# argparse


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    produce = subparsers.add_parser(
        "produce",
        help="send stdin's lines (or generated records) to a topic",
        description="Send stdin's lines to TOPIC, one record per line (kcat -P).",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    produce.add_argument("topic", metavar="TOPIC")
    add_key_separator_flag(produce, "lines are KEY<SEP>VALUE (default: null keys)")
    produce.add_argument(
        "--partition",
        type=non_negative_int_arg,
        metavar="P",
        help="send every record to partition P (default: by key, sticky for null keys)",
    )
    produce.add_argument(
        "--header",
        action="append",
        type=header_arg,
        default=[],
        metavar="K=V",
        help="a header on every record; repeatable (K alone: a null value)",
    )
    produce.add_argument(
        "--acks", choices=("0", "1", "all"), default="all", help="acks (default all)"
    )
    produce.add_argument(
        "--compression",
        choices=tuple(COMPRESSION_CHOICES),
        default="none",
        help="compression.type of the batches (default none)",
    )
    produce.add_argument(
        "--linger-ms",
        type=non_negative_int_arg,
        default=_DEFAULTS.linger_ms,
        metavar="MS",
        help=f"linger.ms (default {_DEFAULTS.linger_ms})",
    )
    produce.add_argument(
        "--batch-size",
        type=positive_int_arg,
        default=_DEFAULTS.batch_size,
        metavar="B",
        help=f"batch.size in bytes (default {_DEFAULTS.batch_size})",
    )
    produce.add_argument(
        "--delivery-timeout-ms",
        type=positive_int_arg,
        default=_PRODUCER_DELIVERY_TIMEOUT_MS,
        metavar="MS",
        help=(
            "delivery.timeout.ms: how long a record may take to be acknowledged, retries "
            f"included (default {_PRODUCER_DELIVERY_TIMEOUT_MS})"
        ),
    )
    produce.add_argument("--count", type=positive_int_arg, metavar="N", help="stop after N records")
    produce.add_argument(
        "--rate", type=rate_arg, metavar="R", help="send at most R records per second"
    )
    produce.add_argument(
        "--size",
        type=non_negative_int_arg,
        metavar="B",
        help="with --count N: send N generated records of B bytes; stdin is not read",
    )
    add_bootstrap_flag(produce)
    set_command(produce, lambda args: cmd_produce(args, produce))


def header_arg(text: str) -> tuple[str, bytes | None]:
    """K=V -> (K, V as UTF-8); K -> (K, None), as kcat's -H."""
    name, equals, value = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"a header needs a name, as in source=cli: {text!r}")
    return name, value.encode() if equals else None


def rate_arg(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not rate > 0 or rate == float("inf"):
        raise argparse.ArgumentTypeError(f"records per second must be positive, got {text}")
    return rate


# ---------------------------------------------------------------------------------------------
# the command


def cmd_produce(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.size is not None and args.count is None:
        return usage_error(parser, "--size generates records and needs --count N (how many)")
    if args.size is not None and args.key_separator is not None:
        return usage_error(parser, "-K splits stdin's lines; generated records have no keys")
    bootstrap: BootstrapServers = args.bootstrap
    config = ProducerConfig(
        acks=ACKS_CHOICES[args.acks],
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        # A request may not outlast the delivery timeout (Kafka requires delivery.timeout.ms
        # >= linger.ms + request.timeout.ms).
        request_timeout_ms=max(
            1, min(_PRODUCER_REQUEST_TIMEOUT_MS, args.delivery_timeout_ms - args.linger_ms)
        ),
        delivery_timeout_ms=args.delivery_timeout_ms,
        max_block_ms=_PRODUCER_MAX_BLOCK_MS,
    )
    target = Target(args.topic, args.partition, tuple(args.header))

    async def work() -> int:
        async with open_client(bootstrap, client_id="ketch-produce") as client:
            count = await partition_count(client, args.topic)
            if args.partition is not None and args.partition >= count:
                raise CliError(
                    f"topic {args.topic!r} has no partition {args.partition} "
                    f"(it has {count}: 0..{count - 1})"
                )
            producer = Producer(
                client, config=config, compression=COMPRESSION_CHOICES[args.compression]
            )
            if args.size is None:
                inputs = stdin_inputs(sys.stdin, args.key_separator)
            else:
                inputs = generated_inputs(args.count, args.size)
            pacer = None if args.rate is None else RatePacer(client.clock, args.rate)
            try:
                tally = await produce_records(
                    producer, target, inputs, count=args.count, pacer=pacer
                )
            finally:
                await producer.close()
        return _report_produce(tally, args.acks)

    return run_async(PRODUCE_PROG, bootstrap, work)


@dataclass(frozen=True, slots=True)
class Target:
    """Where every record goes and what it carries besides its key and value."""

    topic: str
    partition: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class Input:
    """One record to send, or (`error` set) an input that cannot be one; `label` names it in
    messages ("line 3", "record 3")."""

    label: str
    key: bytes | None
    value: bytes
    error: str | None = None


async def stdin_inputs(stream: BinaryIO | TextIO, separator: str | None) -> AsyncIterator[Input]:
    """stdin's lines, split at the first `separator` into key and value when one is given."""
    sep = None if separator is None else separator.encode()
    reader = LineReader(stream)
    number = 0
    while (line := await reader.next_line()) is not None:
        number += 1
        value = line.removesuffix(b"\n").removesuffix(b"\r")
        key: bytes | None = None
        if sep is not None:
            key, found, value = value.partition(sep)
            if not found:
                reason = f"no key separator {separator!r}; not sent"
                yield Input(f"line {number}", None, b"", reason)
                continue
        yield Input(f"line {number}", key, value)


def generated_value(index: int, size: int) -> bytes:
    """Record `index`'s generated value: its number padded with 'x' to `size` bytes."""
    return str(index).encode().ljust(size, b"x")[:size]


async def generated_inputs(count: int, size: int) -> AsyncIterator[Input]:
    for index in range(count):
        yield Input(f"record {index}", None, generated_value(index, size))


class RatePacer:
    """Spaces records at `rate` per second on `clock`: the n-th call (from 0) returns at the first
    call's time + n/rate seconds, or at once when that time has passed (a fixed schedule: the
    average rate holds after a stall). Owned by the produce coroutine."""

    def __init__(self, clock: Clock, rate: float) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self._clock = clock
        self._interval_ns = 1e9 / rate
        self._start_ns: int | None = None
        self._sent = 0

    async def wait(self) -> None:
        now_ns = self._clock.monotonic_ns()
        if self._start_ns is None:
            self._start_ns = now_ns
        due_ns = self._start_ns + round(self._sent * self._interval_ns)
        self._sent += 1
        if due_ns > now_ns:
            await self._clock.sleep((due_ns - now_ns) / (NS_PER_MS * 1000))


@dataclass(slots=True)
class ProduceTally:
    """What happened to the records; touched only by the command's own coroutine."""

    records: int = 0
    acknowledged: int = 0
    failures: list[str] = field(default_factory=list)
    failed: int = 0

    def fail(self, label: str, reason: str) -> None:
        self.failed += 1
        if len(self.failures) < MAX_REPORTED_FAILURES:
            self.failures.append(f"{label}: {reason}")


async def produce_records(
    producer: Producer,
    target: Target,
    inputs: AsyncIterator[Input],
    *,
    count: int | None = None,
    pacer: RatePacer | None = None,
) -> ProduceTally:
    """Send `inputs` (at most `count`, paced by `pacer`); returns once each record is
    acknowledged or failed."""
    tally = ProduceTally()
    pending: deque[tuple[str, asyncio.Future[RecordMetadata]]] = deque()
    async for item in inputs:
        tally.records += 1
        if item.error is not None:
            tally.fail(item.label, item.error)
        else:
            if pacer is not None:
                await pacer.wait()
            try:
                future = await producer.send(
                    target.topic,
                    item.key,
                    item.value,
                    partition=target.partition,
                    headers=target.headers,
                )
            except KafkaError as exc:  # this record can never be sent (too large); others may
                tally.fail(item.label, describe_error(exc, None))
            else:
                pending.append((item.label, future))
            while len(pending) > MAX_PENDING:
                await _settle(tally, *pending.popleft())
        if count is not None and tally.records >= count:
            break
    await producer.flush()
    while pending:
        await _settle(tally, *pending.popleft())
    return tally


async def _settle(tally: ProduceTally, label: str, future: asyncio.Future[RecordMetadata]) -> None:
    try:
        await future
    except Exception as exc:  # the record's own failure, kept on its future by the producer
        # With what to do (e.g. "is a broker down? see `ketch topic describe T`").
        tally.fail(label, describe_error(exc, None))
    else:
        tally.acknowledged += 1


def _report_produce(tally: ProduceTally, acks: str) -> int:
    for failure in tally.failures:
        error(PRODUCE_PROG, failure)
    if tally.failed > len(tally.failures):
        error(PRODUCE_PROG, f"... and {tally.failed - len(tally.failures)} more failures")
    verb = "sent" if acks == "0" else "acknowledged"
    print(
        f"{tally.acknowledged} of {tally.records} record(s) {verb} (acks={acks})",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_OK if tally.failed == 0 else EXIT_FAILED
