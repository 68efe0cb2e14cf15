"""Timing wheel against the event loop's own timers, at 1 thousand to 1 million outstanding.

For each size N, N timers with far deadlines are outstanding first; then we measure, per
operation (median of several rounds):

* add+cancel: schedule a timer 1-50 s out and cancel it at once (what a delayed request that
  completes early costs). stdlib asyncio keeps a heap of Python-level `TimerHandle`s; cancelled
  handles stay in it until the loop compacts the heap, so both sides yield to the loop every
  1000 operations to pay that cost where it really falls.
* add+expire: schedule timers 1-20 ms out and let them all fire (CPU time per timer, idle time
  excluded, measured with `time.process_time_ns`).
* purgatory watch+complete: `try_complete_else_watch` of an operation that cannot complete yet,
  then `check_and_complete` of its key once it can.

uvloop's `call_later` (a C timer heap in libuv) is measured too, for honesty: it is the ceiling
a pure-Python wheel cannot reach. Run with `python -m bench.timers [--sizes 1000,100000]
[--json FILE]`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import uvloop
from rich.console import Console
from rich.table import Table

from runtime.clock import SystemClock
from runtime.purgatory import DelayedOperation, Purgatory
from runtime.timer import Timer

DEFAULT_SIZES = (1_000, 100_000, 1_000_000)
OPS_PER_ROUND = 100_000
EXPIRE_PER_ROUND = 50_000
ROUNDS = 5
YIELD_EVERY = 1_000
FAR_MS = 3_600_000


def _noop() -> None:
    return None


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


async def _rounds(measure: Callable[[], Awaitable[float]]) -> float:
    await measure()  # warm-up round, discarded
    # As timeit does: the cyclic GC off while measuring, for every contender alike, so that a
    # collection's pause over a million live timers does not land in one side's rounds.
    gc.disable()
    try:
        return _median([await measure() for _ in range(ROUNDS)])
    finally:
        gc.enable()


# -- add + cancel ------------------------------------------------------------------------


async def wheel_add_cancel(outstanding: int) -> float:
    timer = Timer(SystemClock())
    keep = [timer.call_later(FAR_MS + i % 600_000, _noop) for i in range(outstanding)]

    async def measure() -> float:
        start = time.perf_counter_ns()
        for i in range(OPS_PER_ROUND):
            timer.call_later(1_000 + i % 50_000, _noop).cancel()
            if i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return (time.perf_counter_ns() - start) / OPS_PER_ROUND

    result = await _rounds(measure)
    timer.close()
    del keep
    return result


async def call_later_add_cancel(outstanding: int) -> float:
    loop = asyncio.get_running_loop()
    keep = [
        loop.call_later(FAR_MS / 1000 + (i % 600_000) / 1000, _noop) for i in range(outstanding)
    ]

    async def measure() -> float:
        start = time.perf_counter_ns()
        for i in range(OPS_PER_ROUND):
            loop.call_later(1 + (i % 50_000) / 1000, _noop).cancel()
            if i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return (time.perf_counter_ns() - start) / OPS_PER_ROUND

    result = await _rounds(measure)
    for handle in keep:
        handle.cancel()
    await asyncio.sleep(0)
    return result


# -- add + expire ------------------------------------------------------------------------


async def _expire_round(schedule: Callable[[int, Callable[[], None]], object]) -> float:
    done = asyncio.Event()
    fired = 0

    def on_fire() -> None:
        nonlocal fired
        fired += 1
        if fired == EXPIRE_PER_ROUND:
            done.set()

    start = time.process_time_ns()
    for i in range(EXPIRE_PER_ROUND):
        schedule(1 + i % 20, on_fire)
    await done.wait()
    return (time.process_time_ns() - start) / EXPIRE_PER_ROUND


async def wheel_add_expire(outstanding: int) -> float:
    timer = Timer(SystemClock())
    keep = [timer.call_later(FAR_MS + i % 600_000, _noop) for i in range(outstanding)]
    result = await _rounds(lambda: _expire_round(timer.call_later))
    timer.close()
    del keep
    return result


async def call_later_add_expire(outstanding: int) -> float:
    loop = asyncio.get_running_loop()
    keep = [
        loop.call_later(FAR_MS / 1000 + (i % 600_000) / 1000, _noop) for i in range(outstanding)
    ]

    def schedule(delay_ms: int, callback: Callable[[], None]) -> object:
        return loop.call_later(delay_ms / 1000, callback)

    result = await _rounds(lambda: _expire_round(schedule))
    for handle in keep:
        handle.cancel()
    await asyncio.sleep(0)
    return result


# -- purgatory ---------------------------------------------------------------------------


class _Op(DelayedOperation):
    __slots__ = ("ready",)

    def __init__(self, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.ready = False

    def try_complete(self) -> bool:
        return self.ready and self.force_complete()

    def on_complete(self) -> None:
        return None

    def on_expiration(self) -> None:
        return None


async def purgatory_watch_complete(outstanding: int) -> float:
    purgatory: Purgatory[int, _Op] = Purgatory("bench", SystemClock())
    for i in range(outstanding):
        purgatory.try_complete_else_watch(_Op(FAR_MS + i % 600_000), [-(i % 1_000) - 1])

    async def measure() -> float:
        start = time.perf_counter_ns()
        for i in range(OPS_PER_ROUND):
            op = _Op(30_000)
            key = i % 100
            purgatory.try_complete_else_watch(op, [key])
            op.ready = True
            purgatory.check_and_complete(key)
            if i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return (time.perf_counter_ns() - start) / OPS_PER_ROUND

    result = await _rounds(measure)
    purgatory.close()
    return result


# -- driver ------------------------------------------------------------------------------


def _run(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], coro: Coroutine[Any, Any, float]
) -> float:
    gc.collect()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)


def measure_size(outstanding: int) -> dict[str, float]:
    std = asyncio.new_event_loop
    uv = uvloop.new_event_loop
    return {
        "wheel_add_cancel_ns": _run(std, wheel_add_cancel(outstanding)),
        "call_later_add_cancel_ns": _run(std, call_later_add_cancel(outstanding)),
        "uvloop_call_later_add_cancel_ns": _run(uv, call_later_add_cancel(outstanding)),
        "wheel_add_expire_ns": _run(std, wheel_add_expire(outstanding)),
        "call_later_add_expire_ns": _run(std, call_later_add_expire(outstanding)),
        "uvloop_call_later_add_expire_ns": _run(uv, call_later_add_expire(outstanding)),
        "purgatory_watch_complete_ns": _run(std, purgatory_watch_complete(outstanding)),
    }


def report(results: dict[str, dict[str, float]], console: Console) -> dict[str, float]:
    table = Table(title="Timers: ns per operation (median of rounds)")
    table.add_column("outstanding", justify="right")
    columns = [
        ("wheel add+cancel", "wheel_add_cancel_ns"),
        ("call_later add+cancel", "call_later_add_cancel_ns"),
        ("uvloop add+cancel", "uvloop_call_later_add_cancel_ns"),
        ("wheel add+expire", "wheel_add_expire_ns"),
        ("call_later add+expire", "call_later_add_expire_ns"),
        ("uvloop add+expire", "uvloop_call_later_add_expire_ns"),
        ("purgatory watch+complete", "purgatory_watch_complete_ns"),
    ]
    for title, _ in columns:
        table.add_column(title, justify="right")
    for size, row in results.items():
        table.add_row(f"{int(size):,}", *(f"{row[key]:,.0f}" for _, key in columns))
    console.print(table)

    sizes = sorted(results, key=int)
    small, large = results[sizes[0]], results[sizes[-1]]
    ratios = {
        "call_later_over_wheel_add_cancel": large["call_later_add_cancel_ns"]
        / large["wheel_add_cancel_ns"],
        "call_later_over_wheel_add_expire": large["call_later_add_expire_ns"]
        / large["wheel_add_expire_ns"],
        "wheel_add_cancel_large_over_small": large["wheel_add_cancel_ns"]
        / small["wheel_add_cancel_ns"],
        "wheel_add_expire_large_over_small": large["wheel_add_expire_ns"]
        / small["wheel_add_expire_ns"],
        "purgatory_large_over_small": large["purgatory_watch_complete_ns"]
        / small["purgatory_watch_complete_ns"],
    }
    console.print(f"At {int(sizes[-1]):,} outstanding (target: stdlib / wheel >= 3x):")
    console.print(
        f"  stdlib call_later / wheel: add+cancel {ratios['call_later_over_wheel_add_cancel']:.2f}x"
        f", add+expire {ratios['call_later_over_wheel_add_expire']:.2f}x"
    )
    console.print(
        f"Flatness, {int(sizes[-1]):,} / {int(sizes[0]):,} outstanding (target <= 1.5x): wheel "
        f"add+cancel {ratios['wheel_add_cancel_large_over_small']:.2f}x, add+expire "
        f"{ratios['wheel_add_expire_large_over_small']:.2f}x; purgatory "
        f"{ratios['purgatory_large_over_small']:.2f}x"
    )
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.timers", description=__doc__)
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--json", dest="json_path", help="also write the figures to this file")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, not {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        parser.error("--sizes needs at least one positive size")
    console = Console()
    results: dict[str, dict[str, float]] = {}
    for size in sizes:
        console.print(f"measuring {size:,} outstanding timers ...")
        results[str(size)] = measure_size(size)
    ratios = report(results, console)
    if args.json_path:
        document: dict[str, Any] = {"sizes": results, "ratios": ratios}
        with open(args.json_path, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
