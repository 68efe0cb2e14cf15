"""`ketch verify` (the Spark job) over the data of a cluster whose brokers compacted a topic and
__consumer_offsets while it ran (tests/sim/live_cleaning.py): clean, with both named as
compacted topics (each replica cleans its own copy at its own time, so their bytes differ and
only their records may be compared, as for any compacted topic)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from offline.verify_job import run_verify
from tests.sim.live_cleaning import TOPIC, run_live_cleaning
from wire.group_records import OFFSETS_TOPIC

pytestmark = pytest.mark.spark


async def test_a_live_cleaned_clusters_data_verifies(spark: SparkSession, tmp_path: Path) -> None:
    await run_live_cleaning(tmp_path)
    report = run_verify(spark, [str(tmp_path)], compacted_topics=[TOPIC, OFFSETS_TOPIC])
    assert report.findings == [], report.findings
    assert report.ok
    assert report.stats["broker_dirs"] == 3
