"""bench.records stays runnable: its batch is what it claims and every figure is produced.

No timing is asserted here (performance is judged from the benchmark's own output).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.records import BATCH_BYTES, main, make_batch, measure
from wire.record_reader import iter_records
from wire.records import validate_batch


def test_benchmark_batch_is_a_valid_16k_batch() -> None:
    batch = make_batch()
    assert len(batch) == BATCH_BYTES == 16 * 1024
    assert validate_batch(batch).records_count == 16
    assert len(list(iter_records(batch))) == 16


def test_measure_reports_every_figure() -> None:
    result = measure(runs=1, iterations=5)
    for key in (
        "validate_patch_ns",
        "append_validate_patch_ns",
        "crc32c_only_ns",
        "validate_ns",
        "patch_ns",
    ):
        value = result[key]
        assert isinstance(value, float)
        assert value > 0


def test_main_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "records.json"
    assert main(["--runs", "1", "--iterations", "3", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["batch_bytes"] == BATCH_BYTES
    assert figures["runs"] == 1
