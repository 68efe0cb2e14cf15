"""Micro-benchmark of a follower's Fetch on the native listener, full against in a fetch session
(KIP-227), for a follower of 100 partitions of one leader: bench/fetch_sessions.py's figure for
the Kafka listener, here for the replica fetcher's path.

Each case is one Fetch round's protocol work at both ends, the request path's reads left out
(the response they would give is prebuilt: 100 partitions with no new records):

    follower   its session handler builds the round (actors/replication/fetch_session_handler.py),
               the FetchRequest is built, encoded to a msgpack envelope;
    leader     the envelope decoded into a FetchRequest, the session's context made
               (runtime/net/fetch_session.py, as runtime/net/native_dialect.py does), the
               answer cut to what the follower must be told, and encoded.

    full                        sessionless: all 100 partitions each way
    incremental, unchanged      in a session, nothing moved: none listed, none answered
    incremental, 1 changed      partition 0's fetch offset and the leader's high watermark
                                move each round: one listed, one answered

Each figure is the median over `--runs` runs of the mean CPU time per round (garbage collection
off while timing), with its ratio to `full`, and the bytes each way.

Run: ``python -m bench.follower_fetch_sessions [--runs 7] [--scale 1.0]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Final

from actors.replication.config import ReplicaFetcherConfig
from actors.replication.fetch_session_handler import FetchSessionHandler
from actors.replication.fetcher_requests import fetch_request
from runtime.clock import ManualClock
from runtime.net.fetch_session import FetchContext, FetchSessionCache
from wire.envelope import (
    RequestEnvelope,
    ResponseEnvelope,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from wire.messages import (
    ApiKey,
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
)
from wire.topic import TopicPartition

TOPIC: Final = "bench"
PARTITIONS: Final = 100
FOLLOWER: Final = 2
HIGH_WATERMARK: Final = 1_000
CONFIG: Final = ReplicaFetcherConfig()
TPS: Final = [TopicPartition(TOPIC, i) for i in range(PARTITIONS)]


def asked(offset_0: int) -> dict[TopicPartition, FetchPartition]:
    return {
        tp: FetchPartition(
            partition=tp.partition,
            current_leader_epoch=5,
            fetch_offset=offset_0 if tp.partition == 0 else HIGH_WATERMARK,
            log_start_offset=0,
            partition_max_bytes=CONFIG.replica_fetch_max_bytes,
        )
        for tp in TPS
    }


def leader_answer(high_watermark_0: int) -> FetchResponse:
    parts = [
        FetchResponsePartition(
            partition_index=tp.partition,
            high_watermark=high_watermark_0 if tp.partition == 0 else HIGH_WATERMARK,
            last_stable_offset=HIGH_WATERMARK,
            log_start_offset=0,
        )
        for tp in TPS
    ]
    return FetchResponse(responses=[FetchableTopicResponse(topic=TOPIC, partitions=parts)])


class Round:
    """One follower and its leader's cache; `__call__` runs one round, returning the bytes
    sent each way."""

    def __init__(self, *, sessions: bool, change: bool) -> None:
        self.handler = FetchSessionHandler()
        self.cache = FetchSessionCache(ManualClock(), 10 if sessions else 0)
        self.change = change
        self.moves = 0

    def __call__(self) -> tuple[int, int]:
        self.moves += self.change
        data = self.handler.build(asked(HIGH_WATERMARK + self.moves))
        request = fetch_request(FOLLOWER, CONFIG, data)
        envelope = RequestEnvelope(ApiKey.FETCH, 0, 1, "bench", request.to_body())
        sent = encode_request(envelope)
        # The leader.
        received = FetchRequest.from_body(decode_request(sent).body)
        forgotten = [(t.topic, t.partitions) for t in received.forgotten_topics_data]
        context = self.cache.new_context(
            received, received.session_id, received.session_epoch, forgotten
        )
        assert isinstance(context, FetchContext), context
        answer, session_id = context.answer(leader_answer(HIGH_WATERMARK + self.moves))
        answer = dataclasses.replace(answer, session_id=session_id)
        reply = encode_response(ResponseEnvelope(1, answer.to_body()))
        # The follower.
        response = FetchResponse.from_body(decode_response(reply).body)
        assert self.handler.handle_response(data, response)
        return len(sent), len(reply)


def cases() -> dict[str, Round]:
    rounds = {
        "full": Round(sessions=False, change=False),
        "incremental, unchanged": Round(sessions=True, change=False),
        "incremental, 1 changed": Round(sessions=True, change=True),
    }
    for one in rounds.values():
        one()  # the session's opening (full) fetch
    return rounds


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


def measure(runs: int, scale: float) -> dict[str, tuple[float, int, int]]:
    """Per case: median ns per round, request bytes, response bytes."""
    iterations = max(1, round(1_000 * scale))
    timed = cases()
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(runs):
        for name, func in timed.items():  # interleaved, so drift hits every case alike
            samples[name].append(time_per_call_ns(func, iterations))
    sizes = {name: func() for name, func in timed.items()}
    return {name: (statistics.median(samples[name]), *sizes[name]) for name in timed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.follower_fetch_sessions", description=__doc__
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    results = measure(args.runs, args.scale)
    full = results["full"][0]
    print(
        f"{'case (100 partitions)':<26}{'per round':>14}{'/ full':>9}{'request':>10}{'answer':>9}"
    )
    for name, (ns, request_bytes, answer_bytes) in results.items():
        print(
            f"{name:<26}{ns / 1000:>11.2f} us{ns / full:>9.2f}"
            f"{request_bytes:>8} B{answer_bytes:>7} B"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
