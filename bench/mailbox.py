"""Which queue should carry actor messages? ketch's Mailbox against asyncio.Queue and anyio's
memory object stream, in one run, plus the whole actor path (tell and ask through the kernel).

One producer sends messages into a queue of capacity 1024 (awaiting room when full, the
backpressure path) while one consumer takes them; figures are ns per message, median of rounds.
Run with `python -m bench.mailbox [--messages N] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio
import uvloop
from rich.console import Console
from rich.table import Table

from runtime.actor import Actor, Ask, handles
from runtime.mailbox import Mailbox

CAPACITY = 1024
ROUNDS = 5


async def _pump(
    put: Callable[[int], Awaitable[None]], get: Callable[[], Awaitable[int]], count: int
) -> float:
    async def consume() -> None:
        for _ in range(count):
            await get()

    start = time.perf_counter_ns()
    consumer = asyncio.ensure_future(consume())
    for i in range(count):
        await put(i)
    await consumer
    return (time.perf_counter_ns() - start) / count


async def ketch_mailbox(count: int) -> float:
    mailbox: Mailbox[int] = Mailbox(CAPACITY)
    return await _pump(mailbox.put, mailbox.get, count)


async def asyncio_queue(count: int) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue(CAPACITY)
    return await _pump(queue.put, queue.get, count)


async def anyio_stream(count: int) -> float:
    send, receive = anyio.create_memory_object_stream[int](CAPACITY)
    async with send, receive:
        return await _pump(send.send, receive.receive, count)


@dataclass(frozen=True, slots=True)
class _Add:
    value: int


@dataclass(frozen=True, slots=True)
class _Total(Ask[int]):
    pass


class _Counter(Actor):
    mailbox_capacity = CAPACITY

    def __init__(self) -> None:
        super().__init__("counter")
        self.total = 0

    @handles(_Add)
    def add(self, message: _Add) -> None:
        self.total += message.value

    @handles(_Total)
    def read(self, message: _Total) -> int:
        return self.total


async def actor_tell(count: int) -> float:
    actor = _Counter()
    await actor.start()
    start = time.perf_counter_ns()
    for i in range(count):
        await actor.tell(_Add(i))
    await actor.ask(_Total())
    elapsed = time.perf_counter_ns() - start
    await actor.stop()
    return elapsed / count


async def actor_ask(count: int) -> float:
    actor = _Counter()
    await actor.start()
    start = time.perf_counter_ns()
    for _ in range(count):
        await actor.ask(_Total())
    elapsed = time.perf_counter_ns() - start
    await actor.stop()
    return elapsed / count


CASES: dict[str, Callable[[int], Coroutine[Any, Any, float]]] = {
    "ketch Mailbox": ketch_mailbox,
    "asyncio.Queue": asyncio_queue,
    "anyio memory stream": anyio_stream,
    "actor tell (Mailbox + dispatch)": actor_tell,
    "actor ask round trip": actor_ask,
}


def measure(count: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    for loop_name, factory in (
        ("asyncio", asyncio.new_event_loop),
        ("uvloop", uvloop.new_event_loop),
    ):
        row: dict[str, float] = {}
        with asyncio.Runner(loop_factory=factory) as runner:
            for name, case in CASES.items():
                runner.run(case(count // 10))  # warm-up
                row[name] = statistics.median(runner.run(case(count)) for _ in range(ROUNDS))
        results[loop_name] = row
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mailbox", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    if args.messages < 10:
        parser.error("--messages must be at least 10")
    results = measure(args.messages)
    table = Table(title=f"Mailbox: ns per message, capacity {CAPACITY} (median of {ROUNDS})")
    table.add_column("queue")
    for loop_name in results:
        table.add_column(loop_name, justify="right")
    for name in CASES:
        table.add_row(name, *(f"{results[loop][name]:,.0f}" for loop in results))
    console = Console()
    console.print(table)
    for loop_name, row in results.items():
        base = row["ketch Mailbox"]
        console.print(
            f"{loop_name}: asyncio.Queue / Mailbox {row['asyncio.Queue'] / base:.2f}x, "
            f"anyio stream / Mailbox {row['anyio memory stream'] / base:.2f}x"
        )
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
