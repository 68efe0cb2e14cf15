"""Live compaction while a 3-broker in-process cluster runs (the scenario and its assertions are
in tests/sim/live_cleaning.py): a compacted topic under an acks=all producer and a reader, and
__consumer_offsets after many commits, cleaned on every replica; the stopped cluster's files
then pass the Spark-free checks of `ketch verify` (tests/spark/test_verify_live_cleaned.py
runs the Spark job itself on the same scenario)."""

from __future__ import annotations

from pathlib import Path

from tests.sim.live_cleaning import OFFSETS_TP, TP, plain_verify, run_live_cleaning


async def test_compacted_topics_are_cleaned_while_the_cluster_runs(tmp_path: Path) -> None:
    cluster = await run_live_cleaning(tmp_path)
    plain_verify(cluster, TP)
    plain_verify(cluster, OFFSETS_TP)
