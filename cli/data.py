"""`ketch produce` and `ketch consume`: lines in, lines out, over the native Producer/Consumer.

    ketch produce TOPIC [--acks 0|1|all] [--key-separator SEP]
    ketch consume TOPIC [--from-beginning] [--max-messages N] [--timeout-ms T] [--partition P]
                        [--print-offsets]

produce reads stdin line by line (the line end is not part of the value; an empty line is an
        empty value). With --key-separator each line is `key<SEP>value`, split at the first SEP;
        a line without SEP is reported and not sent. Records go through client/producer.py
        (batching, the default partitioner: murmur2 of the key, sticky for null keys). The exit
        code is 0 only when every line was acknowledged at the requested acks (acks=0: written
        to the socket), else 1 with the first failures on stderr. At most MAX_PENDING records
        wait for their acknowledgement at a time, so a large input does not grow memory without
        bound. stdin's bytes are read by a daemon thread (`_LineReader`) into a bounded queue,
        so the loop keeps sending while stdin is slow (a terminal), a typed line is sent within
        linger.ms, values are sent byte for byte whatever their encoding, and Ctrl-C is not
        held up by a read that never returns (the default executor's threads are joined at
        loop close; a daemon thread is not).
consume assigns every partition of the topic (or only --partition P) to a client/consumer.py
        Consumer, from the log start with --from-beginning, else from the end (only new
        records). Prints each value (UTF-8, undecodable bytes replaced; a null value prints as
        `null`, as Kafka's console consumer does), or `partition<TAB>offset<TAB>value` with
        --print-offsets. Stops after --max-messages, or once --timeout-ms (default 10000) pass
        without a new record; exits 0 either way, with the count on stderr.

The topic is looked up first with one Metadata request, so an unknown topic fails at once
(exit 1) instead of being retried until a timeout. Each command owns its event loop, client,
producer or consumer for its whole run (cli/common.py); nothing is shared, no locks.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import sys
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Final, TextIO

from cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    CliError,
    SubParsers,
    UnknownTopicError,
    add_bootstrap_flag,
    error,
    fetch_metadata,
    non_negative_int_arg,
    open_client,
    positive_int_arg,
    run_argv,
    run_async,
    set_command,
)
from client.accumulator import RecordMetadata
from client.client import Client
from client.config import ACKS_ALL, ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.fetched_records import ConsumerRecord
from client.producer import Producer
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError
from wire.topic import TopicPartition

PRODUCE_PROG: Final = "ketch produce"
CONSUME_PROG: Final = "ketch consume"
DEFAULT_CONSUME_TIMEOUT_MS: Final = 10_000
MAX_PENDING: Final = 10_000  # records awaiting acknowledgement before reading more input
MAX_REPORTED_FAILURES: Final = 10  # the rest are counted, not printed one by one
ACKS_CHOICES: Final = {"0": 0, "1": 1, "all": ACKS_ALL, "-1": ACKS_ALL}

# The CLI's producer: Kafka's defaults, except that a command line user should hear about a
# record that cannot be delivered within seconds, not after Kafka's two minutes.
_PRODUCER_DELIVERY_TIMEOUT_MS: Final = 30_000
_PRODUCER_REQUEST_TIMEOUT_MS: Final = 15_000
_PRODUCER_MAX_BLOCK_MS: Final = 15_000


# ---------------------------------------------------------------------------------------------
# argparse


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    produce = subparsers.add_parser("produce", help="send stdin's lines to a topic")
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument(
        "--acks",
        choices=("0", "1", "all"),
        default="all",
        help="acknowledgement level (default all)",
    )
    produce.add_argument(
        "--key-separator",
        metavar="SEP",
        type=_separator_arg,
        help="lines are KEY<SEP>VALUE (default: no key)",
    )
    add_bootstrap_flag(produce)
    set_command(produce, cmd_produce)

    consume = subparsers.add_parser("consume", help="print a topic's records")
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument(
        "--from-beginning", action="store_true", help="start at the log start (default: the end)"
    )
    consume.add_argument("--max-messages", type=positive_int_arg, metavar="N")
    consume.add_argument(
        "--timeout-ms",
        type=non_negative_int_arg,
        default=DEFAULT_CONSUME_TIMEOUT_MS,
        metavar="T",
        help=f"stop after T ms without a new record (default {DEFAULT_CONSUME_TIMEOUT_MS})",
    )
    consume.add_argument("--partition", type=non_negative_int_arg, metavar="P")
    consume.add_argument(
        "--print-offsets", action="store_true", help="print partition<TAB>offset<TAB>value"
    )
    add_bootstrap_flag(consume)
    set_command(consume, cmd_consume)


def main(argv: Sequence[str]) -> int:
    """`ketch produce|consume ...` without cli/main.py: `main(["consume", "t"])`."""
    return run_argv("ketch", register, argv)


def _separator_arg(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("the key separator cannot be empty")
    return text


async def partition_count(client: Client, topic: str) -> int:
    """The topic's partition count from one Metadata request; UnknownTopicError if absent."""
    response = await fetch_metadata(client, [topic])
    found = next((t for t in response.topics if t.name == topic), None)
    if found is None or found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise UnknownTopicError(topic)
    if found.error_code != ErrorCode.NONE:
        raise KafkaError(found.error_code, f"metadata of topic {topic!r}")
    return len(found.partitions)


# ---------------------------------------------------------------------------------------------
# produce


@dataclass(slots=True)
class _ProduceTally:
    """What happened to the lines; touched only by the command's own coroutine."""

    lines: int = 0
    acknowledged: int = 0
    failures: list[str] = field(default_factory=list)
    failed: int = 0

    def fail(self, line_number: int, reason: str) -> None:
        self.failed += 1
        if len(self.failures) < MAX_REPORTED_FAILURES:
            self.failures.append(f"line {line_number}: {reason}")


def cmd_produce(args: argparse.Namespace) -> int:
    bootstrap: Address = args.bootstrap
    config = ProducerConfig(
        acks=ACKS_CHOICES[args.acks],
        request_timeout_ms=_PRODUCER_REQUEST_TIMEOUT_MS,
        delivery_timeout_ms=_PRODUCER_DELIVERY_TIMEOUT_MS,
        max_block_ms=_PRODUCER_MAX_BLOCK_MS,
    )

    async def work() -> int:
        async with open_client(bootstrap, client_id="ketch-produce") as client:
            await partition_count(client, args.topic)
            producer = Producer(client, config=config)
            try:
                tally = await produce_lines(producer, args.topic, sys.stdin, args.key_separator)
            finally:
                await producer.close()
        return _report_produce(tally, args.acks)

    return run_async(PRODUCE_PROG, bootstrap, work)


async def produce_lines(
    producer: Producer, topic: str, lines: BinaryIO | TextIO, separator: str | None
) -> _ProduceTally:
    """Send every line of `lines`; returns once each record is acknowledged or failed."""
    tally = _ProduceTally()
    pending: deque[tuple[int, asyncio.Future[RecordMetadata]]] = deque()
    sep = None if separator is None else separator.encode()
    reader = _LineReader(lines)
    while (line := await reader.next_line()) is not None:
        tally.lines += 1
        value = line.removesuffix(b"\n").removesuffix(b"\r")
        key: bytes | None = None
        if sep is not None:
            key, found, value = value.partition(sep)
            if not found:
                tally.fail(tally.lines, f"no key separator {separator!r}; not sent")
                continue
        try:
            future = await producer.send(topic, key, value)
        except KafkaError as exc:  # this record can never be sent (too large); others may
            tally.fail(tally.lines, str(exc))
            continue
        pending.append((tally.lines, future))
        while len(pending) > MAX_PENDING:
            await _settle(tally, *pending.popleft())
    await producer.flush()
    while pending:
        await _settle(tally, *pending.popleft())
    return tally


class _LineReader:
    """Lines of a blocking input, read by a daemon thread and handed to the loop in chunks
    through a bounded asyncio queue (the thread blocks while it is full: backpressure).

    When the input has a file descriptor (a real stdin: terminal, pipe or file) the thread
    reads it with `os.read`, never through `sys.stdin`'s buffered object: a daemon thread
    blocked inside that object holds its lock, and the interpreter aborts at exit when it
    cannot take it ("could not acquire lock ... at interpreter shutdown"), which is exactly
    what Ctrl-C during an interactive produce would do. Streams without a descriptor (a test's
    StringIO) are read with `readline()`, through their byte layer when they have one; text
    is encoded as UTF-8.

    The thread only reads and hands over via `run_coroutine_threadsafe`; the queue is touched
    by the loop thread alone. When the loop is gone (the command ended or was interrupted) the
    hand-over fails or is cancelled and the thread ends; a thread blocked in a read dies with
    the process. A read error is handed over too, so the command never waits forever.
    """

    QUEUE_CHUNKS: Final = 64
    READ_BYTES: Final = 65_536

    def __init__(self, stream: BinaryIO | TextIO) -> None:
        self._stream = stream
        self._fd = _file_descriptor(stream)
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[list[bytes] | OSError | ValueError | None] = asyncio.Queue(
            self.QUEUE_CHUNKS
        )
        self._lines: deque[bytes] = deque()
        self._done = False
        threading.Thread(target=self._run, name="ketch produce stdin", daemon=True).start()

    async def next_line(self) -> bytes | None:
        """The next line with its line end, or None at the end of the input."""
        while not self._lines and not self._done:
            item = await self._queue.get()
            if isinstance(item, OSError | ValueError):
                raise CliError(f"cannot read the input: {item}")
            if item is None:
                self._done = True
            else:
                self._lines.extend(item)
        return self._lines.popleft() if self._lines else None

    def _run(self) -> None:
        try:
            try:
                if self._fd is None:
                    self._read_lines()
                else:
                    self._read_fd(self._fd)
            except (OSError, ValueError) as exc:  # stdin closed, or undecodable text
                self._hand_over(exc)
                return
            self._hand_over(None)
        except (RuntimeError, concurrent.futures.CancelledError):
            pass  # the loop has ended (command done or interrupted): nobody waits for lines

    def _read_fd(self, fd: int) -> None:
        partial = b""
        while chunk := os.read(fd, self.READ_BYTES):
            *complete, partial = (partial + chunk).split(b"\n")
            if complete:
                self._hand_over([line + b"\n" for line in complete])
        if partial:
            self._hand_over([partial])  # a last line without a line end

    def _read_lines(self) -> None:
        # A text stream with a byte layer is read through it, so bytes pass unchanged here too.
        source: BinaryIO | TextIO = getattr(self._stream, "buffer", self._stream)
        while line := source.readline():
            self._hand_over([line.encode() if isinstance(line, str) else line])

    def _hand_over(self, item: list[bytes] | OSError | ValueError | None) -> None:
        asyncio.run_coroutine_threadsafe(self._queue.put(item), self._loop).result()


def _file_descriptor(stream: BinaryIO | TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


async def _settle(
    tally: _ProduceTally, line_number: int, future: asyncio.Future[RecordMetadata]
) -> None:
    try:
        await future
    except Exception as exc:  # the record's own failure, kept on its future by the producer
        tally.fail(line_number, str(exc) or type(exc).__name__)
    else:
        tally.acknowledged += 1


def _report_produce(tally: _ProduceTally, acks: str) -> int:
    for failure in tally.failures:
        error(PRODUCE_PROG, failure)
    if tally.failed > len(tally.failures):
        error(PRODUCE_PROG, f"... and {tally.failed - len(tally.failures)} more failures")
    verb = "sent" if acks == "0" else "acknowledged"
    print(
        f"{tally.acknowledged} of {tally.lines} record(s) {verb} (acks={acks})",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_OK if tally.failed == 0 else EXIT_FAILED


# ---------------------------------------------------------------------------------------------
# consume


def cmd_consume(args: argparse.Namespace) -> int:
    bootstrap: Address = args.bootstrap
    config = ConsumerConfig(auto_offset_reset="earliest" if args.from_beginning else "latest")

    async def work() -> int:
        async with open_client(bootstrap, client_id="ketch-consume") as client:
            count = await partition_count(client, args.topic)
            if args.partition is not None and args.partition >= count:
                raise CliError(
                    f"topic {args.topic!r} has no partition {args.partition} "
                    f"(it has {count}: 0..{count - 1})"
                )
            chosen = range(count) if args.partition is None else [args.partition]
            consumer = Consumer(client, config=config)
            progress = ConsumeProgress()
            try:
                consumer.assign(TopicPartition(args.topic, p) for p in chosen)
                await consume_records(
                    consumer,
                    progress,
                    max_messages=args.max_messages,
                    idle_timeout_ms=args.timeout_ms,
                    print_offsets=args.print_offsets,
                )
            finally:
                # Also after Ctrl-C, the usual way to end a consume without --timeout-ms.
                print(
                    f"Processed a total of {progress.printed} message(s)",
                    file=sys.stderr,
                    flush=True,
                )
                await consumer.close()
        return EXIT_OK

    return run_async(CONSUME_PROG, bootstrap, work)


@dataclass(slots=True)
class ConsumeProgress:
    """How many records were printed; owned by the consume coroutine."""

    printed: int = 0


async def consume_records(
    consumer: Consumer,
    progress: ConsumeProgress,
    *,
    max_messages: int | None,
    idle_timeout_ms: int,
    print_offsets: bool,
) -> None:
    """Print records until `max_messages`, or `idle_timeout_ms` without one.

    Every poll waits at most the idle timeout, and a poll that returns nothing means that
    much time passed without a record (polls return as soon as a fetch brings records).
    """
    out = sys.stdout
    while max_messages is None or progress.printed < max_messages:
        records = await consumer.poll(timeout_ms=idle_timeout_ms)
        if not records:
            return
        if max_messages is not None:
            records = records[: max_messages - progress.printed]
        out.write("".join(format_record(r, print_offsets) for r in records))
        out.flush()  # a reader at the other end of a pipe sees each record as it arrives
        progress.printed += len(records)


def format_record(record: ConsumerRecord, print_offsets: bool) -> str:
    value = "null" if record.value is None else record.value.decode("utf-8", errors="replace")
    if print_offsets:
        return f"{record.partition}\t{record.offset}\t{value}\n"
    return f"{value}\n"
