"""bench.kafka_codec stays runnable: its inputs are what it claims, both paths agree on them,
and every figure is produced.

No timing is asserted here (performance is judged from the benchmark's own output).
"""

from __future__ import annotations

import pytest

from bench.kafka_codec import MIB, cases, fetch_response, main, measure, produce_frame
from wire.kafka.codec import read_prefix
from wire.kafka.produce_codec import decode_produce_request


def test_the_produce_frames_carry_one_record_set_of_the_size_named() -> None:
    for value_bytes in (100, MIB):
        frame = produce_frame(value_bytes)
        _, request = decode_produce_request(frame, read_prefix(frame))
        (topic,) = request.topic_data
        (partition,) = topic.partition_data
        assert value_bytes < len(partition.records) < value_bytes + 100  # one batch, one record


def test_the_fetch_answers_carry_distinct_record_sets() -> None:
    response = fetch_response(10, 1000)
    records = [p.records for p in response.responses[0].partitions]
    assert len(records) == 10
    assert len({bytes(r) for r in records}) == 10


def test_both_paths_agree_on_every_case() -> None:
    for case in cases(scale=0.001):
        assert case.same(), case.name


def test_measure_reports_every_figure() -> None:
    results = measure(runs=1, scale=0.001)
    assert len(results) == 5
    for figures in results.values():
        assert figures["general_ns"] > 0
        assert figures["hand_ns"] > 0
        assert figures["ratio"] == figures["general_ns"] / figures["hand_ns"]
    assert all("hand_joined_ns" in f for name, f in results.items() if "fetch" in name)


def test_main_prints_a_line_per_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--runs", "1", "--scale", "0.001"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(("produce" in line or "fetch" in line) and " us" in line for line in lines) == 5
