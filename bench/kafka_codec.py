"""Micro-benchmark of the Kafka listener's hot codecs: the hand-written Produce and Fetch codecs
(wire/kafka/produce_codec.py, wire/kafka/fetch_codec.py) against the general path they replace
(kio's reader and writer plus the native<->kio conversion of wire/kafka/apis.py).

Cases, each timed both ways on the same input:

    produce decode, 100 B     a Produce v9 request of one batch with one 100-byte value
    produce decode, 1 MiB     the same with a 1 MiB record set
    produce encode (answer)   the Produce v9 answer to one partition's append
    fetch encode, 1 x 1 MiB   a Fetch v16 answer (topic by id) of one partition of 1 MiB
    fetch encode, 10 x 1 MiB  ... of ten partitions of 1 MiB each

A request is decoded from a read-only memoryview of its frame, as the server hands it over:
general = `decode_request` + `KafkaApi.native_request`; hand = `decode_produce_request`. A
response is framed whole: general = `kio_response` + `encode_response` (one bytes object);
hand = `encode_fetch_response` (a list of buffers, the record sets not copied), and, for
reference, hand + `b"".join` (what sending it without a vectored write would cost).

Each figure is the median over `--runs` runs of the mean CPU time per call (the process's CPU
time, which other processes on a shared machine disturb less than the wall clock; garbage
collection off while timing); ratio = general / hand.

Run: ``python -m bench.kafka_codec [--runs 7] [--scale 1.0]``.
"""

from __future__ import annotations

import argparse
import gc
import io
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kio.serial import entity_writer
from kio.static.constants import EntityType

from wire.batch_builder import build_batch
from wire.kafka.apis import APIS, FetchByIds
from wire.kafka.codec import decode_request, encode_response, read_prefix, schema
from wire.kafka.convert import to_kio
from wire.kafka.fetch_codec import encode_fetch_response
from wire.kafka.produce_codec import decode_produce_request, encode_produce_response
from wire.messages import (
    ApiKey,
    FetchableTopicResponse,
    FetchResponse,
    FetchResponsePartition,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)

PRODUCE_VERSION: Final = 9
FETCH_VERSION: Final = 16
MIB: Final = 1 << 20
TOPIC: Final = "bench"
TOPIC_ID: Final = uuid.UUID(int=0x6B65746368).bytes


class _Topics:
    """The broker's metadata as the Fetch codecs see it: one topic."""

    def name_of(self, topic_id: bytes) -> str | None:
        return TOPIC if topic_id == TOPIC_ID else None

    def id_of(self, name: str) -> bytes:
        return TOPIC_ID


def produce_frame(value_bytes: int) -> bytes:
    """A Produce v9 request frame (without its 4-byte length) carrying one batch with one
    record of `value_bytes`, written by kio as a Kafka client writes it."""
    records = build_batch([(b"key", bytes(value_bytes))], base_timestamp=1)
    native = ProduceRequest(
        acks=1,
        timeout_ms=30_000,
        topic_data=[
            TopicProduceData(
                name=TOPIC, partition_data=[PartitionProduceData(index=0, records=records)]
            )
        ],
    )
    request_cls = schema(ApiKey.PRODUCE, PRODUCE_VERSION, EntityType.request)
    header_cls = request_cls.__header_schema__
    header = header_cls(
        request_api_key=ApiKey.PRODUCE,
        request_api_version=PRODUCE_VERSION,
        correlation_id=1,
        client_id="bench",
    )
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header)
    entity_writer(request_cls)(buffer, to_kio(native, request_cls))
    return buffer.getvalue()


def fetch_response(partitions: int, records_bytes: int) -> FetchResponse:
    """A native Fetch answer of `partitions` partitions of one topic, each `records_bytes` of
    records (distinct objects, as a real answer's are)."""
    return FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic=TOPIC,
                partitions=[
                    FetchResponsePartition(
                        partition_index=index,
                        high_watermark=1000,
                        last_stable_offset=1000,
                        log_start_offset=0,
                        records=bytes([index]) * records_bytes,
                    )
                    for index in range(partitions)
                ],
            )
        ]
    )


def produce_response() -> ProduceResponse:
    """The native answer to one of `produce_frame`'s requests."""
    partition = PartitionProduceResponse(index=0, base_offset=123_456, log_start_offset=0)
    return ProduceResponse(
        responses=[TopicProduceResponse(name=TOPIC, partition_responses=[partition])]
    )


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    general: Callable[[], object]
    hand: Callable[[], object]
    iterations: int
    same: Callable[[], bool]  # both paths give the same result (else timing them is moot)
    hand_joined: Callable[[], object] | None = None


def cases(scale: float) -> list[Case]:
    """The benchmark's cases; `scale` multiplies every iteration count (at least one call)."""
    topics = _Topics()
    produce_api = APIS[ApiKey.PRODUCE]
    fetch_api = APIS[ApiKey.FETCH]
    fetch_response_cls = schema(ApiKey.FETCH, FETCH_VERSION, EntityType.response)
    note = FetchByIds({TOPIC: TOPIC_ID}, [])

    def produce_case(name: str, value_bytes: int, iterations: int) -> Case:
        frame = memoryview(produce_frame(value_bytes)).toreadonly()
        prefix = read_prefix(frame)

        def general() -> object:
            request = decode_request(frame, prefix)
            return produce_api.native_request(request.body, PRODUCE_VERSION, topics)

        def hand() -> object:
            return decode_produce_request(frame, prefix)

        def same() -> bool:
            request, _ = produce_api.native_request(
                decode_request(frame, prefix).body, PRODUCE_VERSION, topics
            )
            return decode_produce_request(frame, prefix) == ("bench", request)

        return Case(name, general, hand, iterations, same)

    def fetch_case(name: str, partitions: int, iterations: int) -> Case:
        response = fetch_response(partitions, MIB)

        def general() -> object:
            answer = fetch_api.kio_response(response, fetch_response_cls, note, topics)
            return encode_response(1, answer)

        def hand() -> list[Any]:
            return encode_fetch_response(1, FETCH_VERSION, response, note, topics)

        def joined() -> object:
            return b"".join(hand())

        def same() -> bool:
            return joined() == general()

        return Case(name, general, hand, iterations, same, joined)

    def produce_answer_case(name: str, iterations: int) -> Case:
        response = produce_response()
        response_cls = schema(ApiKey.PRODUCE, PRODUCE_VERSION, EntityType.response)

        def general() -> object:
            answer = produce_api.kio_response(response, response_cls, None, topics)
            return encode_response(1, answer)

        def hand() -> object:
            return encode_produce_response(1, PRODUCE_VERSION, response)

        def same() -> bool:
            return hand() == general()

        return Case(name, general, hand, iterations, same)

    def scaled(iterations: int) -> int:
        return max(1, round(iterations * scale))

    return [
        produce_case("produce decode, 100 B", 100, scaled(20_000)),
        produce_case("produce decode, 1 MiB", MIB, scaled(300)),
        produce_answer_case("produce encode (answer)", scaled(20_000)),
        fetch_case("fetch encode, 1 x 1 MiB", 1, scaled(200)),
        fetch_case("fetch encode, 10 x 1 MiB", 10, scaled(20)),
    ]


def time_per_call_ns(func: Callable[[], object], iterations: int) -> float:
    """Mean CPU ns per call of `func` over `iterations` calls."""
    gc.disable()
    try:
        start = time.process_time_ns()
        for _ in range(iterations):
            func()
        elapsed = time.process_time_ns() - start
    finally:
        gc.enable()
    return elapsed / iterations


def measure(runs: int, scale: float) -> dict[str, dict[str, float]]:
    """Per case: median ns per call of the general path, the hand path (and hand + join for
    Fetch), and general / hand."""
    results: dict[str, dict[str, float]] = {}
    for case in cases(scale):
        if not case.same():
            raise AssertionError(f"{case.name}: the two paths give different results")
        samples: dict[str, list[float]] = {"general_ns": [], "hand_ns": []}
        if case.hand_joined is not None:
            samples["hand_joined_ns"] = []
        for _ in range(runs):
            # Alternate the paths within each run so drift in machine speed hits both alike.
            samples["general_ns"].append(time_per_call_ns(case.general, case.iterations))
            samples["hand_ns"].append(time_per_call_ns(case.hand, case.iterations))
            if case.hand_joined is not None:
                samples["hand_joined_ns"].append(
                    time_per_call_ns(case.hand_joined, case.iterations)
                )
        medians = {name: statistics.median(values) for name, values in samples.items()}
        medians["ratio"] = medians["general_ns"] / medians["hand_ns"]
        results[case.name] = medians
    return results


def _us(ns: float) -> str:
    return f"{ns / 1000:>10.2f} us"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_codec", description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="runs per case (median reported)")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiplies each case's calls per run"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.scale <= 0:
        parser.error("--runs and --scale must be positive")
    results = measure(args.runs, args.scale)
    print(
        f"Kafka codecs, Produce v{PRODUCE_VERSION} / Fetch v{FETCH_VERSION}, "
        f"median of {args.runs} runs (ratio = general / hand)"
    )
    print(f"  {'case':<26}{'general (kio)':>14}{'hand':>14}{'ratio':>8}   hand + join")
    for name, figures in results.items():
        joined = figures.get("hand_joined_ns")
        print(
            f"  {name:<26}{_us(figures['general_ns'])}{_us(figures['hand_ns'])}"
            f"{figures['ratio']:>7.1f}x" + ("" if joined is None else f" {_us(joined)}")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
