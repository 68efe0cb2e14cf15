"""`ketch verify` over a 3-broker data dir written by the storage engine: the clean copy passes;
a copy with one injected problem per partition/replica (and a partition with transactions whose
.txnindex was damaged) reports each of them, exactly (kind, log dir, partition and offsets),
and nothing else; the transaction left open there is counted, not reported.

Two verify runs in all (Spark jobs cost seconds): the corrupted copy carries every corruption
at once, each on its own replica, so "nothing else" also proves there is no false positive on
the untouched replicas, the compacted topic (offset gaps, a replica compacted further) and
the live broker dir (damage above its recovery point is not judged).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from offline.verify import main
from offline.verify_job import run_verify
from tests.unit.offline.corruptions import OPEN_TXN, corrupt
from tests.unit.offline.helpers import TABLE, BuiltCluster

pytestmark = pytest.mark.spark


def _copy(cluster: BuiltCluster, target: Path) -> Path:
    shutil.copytree(cluster.root, target)
    return target


def test_clean_cluster_passes(spark: SparkSession, cluster: BuiltCluster, tmp_path: Path) -> None:
    root = _copy(cluster, tmp_path / "data")
    report = run_verify(spark, [str(root)])
    assert report.ok, report.findings
    assert report.findings == []
    leader_batches = sum(len(b) for b in cluster.batches.values())
    stats = report.stats
    assert stats["broker_dirs"] == 3
    assert stats["partitions"] == 5  # 3 events, 1 table, 1 quiet (empty)
    assert stats["replicas"] == 15
    assert stats["partial_dirs"] == []
    assert stats["compacted_topics"] == [TABLE]
    # Every events batch on all three replicas, plus the table's (broker-2's copy has as many
    # batches as the others: compaction there emptied none of them).
    assert stats["batches"] == 3 * leader_batches + 3 * 10


def test_every_injected_problem_is_reported_exactly(
    spark: SparkSession,
    cluster: BuiltCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = _copy(cluster, tmp_path / "data")
    expected = corrupt(cluster, root)
    # Run through the command line (JSON report, exit code) on the shared session: main stops
    # the session it built, which here is the test session, so stopping is disarmed.
    monkeypatch.setattr(spark, "stop", lambda: None)
    report_path = tmp_path / "report.json"
    code = main([str(root), "--json", str(report_path)])
    report = json.loads(report_path.read_text())
    found = {
        (
            f["kind"],
            None if f["broker_dir"] is None else Path(f["broker_dir"]).name,
            f["topic"],
            f["partition"],
            None if f["offsets"] is None else tuple(f["offsets"]),
        )
        for f in report["findings"]
    }
    details = "\n".join(f"{f['kind']} {f['broker_dir']} {f['detail']}" for f in report["findings"])
    assert found == expected, details
    assert len(report["findings"]) == len(expected), details
    assert code == 1
    assert report["ok"] is False
    assert report["stats"]["partial_dirs"] == [str((root / "broker-2").resolve())]
    assert report["stats"]["open_transactions"] == 1
    (open_txn,) = report["stats"]["open_transaction_examples"]
    assert (open_txn["topic"], open_txn["partition"], open_txn["producer_id"]) == OPEN_TXN
