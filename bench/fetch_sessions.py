"""Micro-benchmark of the Kafka listener's Fetch answer building, full against in a fetch session
(runtime/net/fetch_session.py), for a consumer of 100 partitions of one topic.

Cases, each the listener's own work for one Fetch, from the request frame to the answer's
buffers (the request path's reads, which are the same for every case, are left out: the
response it would give is prebuilt, 100 partitions with no new records):

    full                        a sessionless Fetch v11 naming all 100 partitions: decoded, and
                                all 100 partitions encoded in the answer
    incremental, unchanged      a Fetch v11 in a session naming none: decoded, the session's
                                context made (its native request of 100 partitions is cached),
                                the 100 partitions compared with what the client was last told,
                                none encoded
    incremental, 1 changed      the same with partition 0's high watermark moved each time: one
                                partition encoded

Each figure is the median over `--runs` runs of the mean CPU time per call (garbage collection
off while timing), with its ratio to `full`.

Run: ``python -m bench.fetch_sessions [--runs 7] [--scale 1.0]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import struct
import sys
import time
from collections.abc import Callable
from typing import Final

from runtime.clock import ManualClock
from runtime.net.fetch_session import FetchSessionCache, FullFetchContext
from wire.kafka.apis import TopicIds
from wire.kafka.codec import read_prefix
from wire.kafka.fetch_codec import decode_fetch, encode_fetch_response
from wire.messages import FetchableTopicResponse, FetchResponse, FetchResponsePartition

TOPIC: Final = "bench"
PARTITIONS: Final = 100
VERSION: Final = 11  # the last version before flexible fields: frames are easy to write by hand
HIGH_WATERMARK: Final = 1_000
_HEADER: Final = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_LIMITS: Final = struct.Struct(">iiiibii")  # replica, max wait, min/max bytes, isolation, session
_PARTITION: Final = struct.Struct(">iiqqi")  # index, leader epoch, fetch offset, log start, max
# Where the session epoch is: after the header, the 2-byte client id, the limits and session id.
_EPOCH_AT: Final = _HEADER.size + 2 + _LIMITS.size - 4


class _Topics(TopicIds):
    def name_of(self, topic_id: bytes) -> str | None:
        return None

    def id_of(self, name: str) -> bytes:
        return bytes(16)


def fetch_frame(partitions: int, session_id: int, epoch: int) -> bytearray:
    """A Fetch v11 request frame (after its 4-byte length) of partitions 0.. of TOPIC."""
    out = bytearray(_HEADER.pack(1, VERSION, 1, 2) + b"cb")
    out += _LIMITS.pack(-1, 500, 1, 50 << 20, 0, session_id, epoch)
    if partitions:
        out += struct.pack(">ih", 1, len(TOPIC)) + TOPIC.encode()
        out += struct.pack(">i", partitions)
        for index in range(partitions):
            out += _PARTITION.pack(index, 0, HIGH_WATERMARK, 0, 1 << 20)
    else:
        out += struct.pack(">i", 0)
    out += struct.pack(">ih", 0, 0)  # no forgotten topics, empty rack id
    return out


def fetch_response(high_watermark_0: int) -> FetchResponse:
    parts = [
        FetchResponsePartition(
            partition_index=index,
            high_watermark=high_watermark_0 if index == 0 else HIGH_WATERMARK,
            last_stable_offset=HIGH_WATERMARK,
            log_start_offset=0,
        )
        for index in range(PARTITIONS)
    ]
    return FetchResponse(responses=[FetchableTopicResponse(topic=TOPIC, partitions=parts)])


def cases() -> dict[str, Callable[[], object]]:
    topics = _Topics()
    full_frame = memoryview(fetch_frame(PARTITIONS, 0, -1)).toreadonly()
    full_prefix = read_prefix(full_frame)
    unchanged = fetch_response(HIGH_WATERMARK)
    moved = [fetch_response(HIGH_WATERMARK + 1), fetch_response(HIGH_WATERMARK + 2)]

    def full() -> object:
        _, request, note, _ = decode_fetch(full_frame, full_prefix, topics)
        assert len(request.topics[0].partitions) == PARTITIONS
        return encode_fetch_response(1, VERSION, unchanged, note, topics)

    def session() -> Callable[[bool], object]:
        cache = FetchSessionCache(ManualClock())
        _, request, _, _ = decode_fetch(full_frame, full_prefix, topics)
        opening = cache.new_context(request, 0, 0)
        assert isinstance(opening, FullFetchContext)
        _, session_id = opening.answer(unchanged)
        frame = fetch_frame(0, session_id, 1)
        view = memoryview(frame).toreadonly()
        prefix = read_prefix(view)
        state = {"epoch": 1}

        def incremental(change: bool) -> object:
            epoch = state["epoch"]
            struct.pack_into(">i", frame, _EPOCH_AT, epoch)
            state["epoch"] = epoch + 1
            _, request, note, fields = decode_fetch(view, prefix, topics)
            context = cache.new_context(request, fields.session_id, fields.session_epoch)
            assert not isinstance(context, int), context
            response = moved[epoch % 2] if change else unchanged
            answer, answered_id = context.answer(response)
            assert answered_id == session_id
            assert len(answer.responses) == (1 if change else 0)
            return encode_fetch_response(1, VERSION, answer, note, topics, answered_id)

        return incremental

    unchanged_session = session()
    changed_session = session()
    return {
        "full": full,
        "incremental, unchanged": lambda: unchanged_session(False),
        "incremental, 1 changed": lambda: changed_session(True),
    }


def time_per_call_ns(func: Callable[[], object], iterations: int) -> float:
    gc.disable()
    try:
        start = time.process_time_ns()
        for _ in range(iterations):
            func()
        elapsed = time.process_time_ns() - start
    finally:
        gc.enable()
    return elapsed / iterations


def measure(runs: int, scale: float) -> dict[str, float]:
    """Median ns per call of each case."""
    iterations = max(1, round(2_000 * scale))
    timed = cases()
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(runs):
        for name, func in timed.items():  # interleaved, so drift hits every case alike
            samples[name].append(time_per_call_ns(func, iterations))
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fetch_sessions", description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    results = measure(args.runs, args.scale)
    full = results["full"]
    print(f"{'case (100 partitions)':<26}{'per call':>14}{'/ full':>10}")
    for name, ns in results.items():
        print(f"{name:<26}{ns / 1000:>11.2f} us{ns / full:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
