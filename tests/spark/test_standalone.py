"""`ketch verify` and `ketch compact` on a Spark standalone cluster (`ketch spark up`: a master
and two workers on 127.0.0.1, executors in their own JVMs on both workers) give the answers the
local[2] runs give on the same data:

* verify, on a copy of the 3-broker data dir carrying one injected problem per replica: the same
  exit code and the same JSON report (every finding, every stat) but its timing;
* compact, staged (not installed): the same summary but its timing and staging dir, and the
  same staged files, byte for byte. `ketch compact` takes `now` from the wall clock, and the
  bytes depend on it (a kept tombstone's batch gets a delete horizon ``now +
  delete.retention.ms``, and its records' timestamp deltas, gzip-compressed in some batches, are
  relative to it: `offline.compact_write`), so the local run is given the cluster run's `now`,
  read back from the horizons it set.

The data dir and the staging dir are read and written by the executors, through the same paths
as the driver: one machine is a shared file system. Each job is checked to have run as an
application of the cluster with an executor on both workers, so a run that quietly fell back
to local mode fails. The local[2] answers come from the shared session in this process; the
cluster's from `ketch` processes (`tests.spark.standalone_cli` says why).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from offline.compact import run_compact, summary_json
from offline.verify import report_json
from offline.verify_job import run_verify
from tests.spark.standalone_cli import SMALL_JOB, SparkUp, described, run_ketch
from tests.unit.offline.compact_helpers import (
    COMPACT_PROPS,
    RETENTION_MS,
    TOPIC,
    build_broker_dir,
    build_transactional_partition,
    read_partition,
)
from tests.unit.offline.corruptions import corrupt
from tests.unit.offline.helpers import BuiltCluster

# A job on the cluster starts a driver and two executor JVMs: tens of seconds on a busy machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SEED = 31
PARTITIONS = 2  # plus one with transactions


def _ran_on_both_workers(standalone: SparkUp, app_name: str) -> None:
    app_id = standalone.app_id(app_name)
    assert standalone.executor_workers(app_id) == ["worker-0", "worker-1"], app_id


def _untimed(report: dict[str, Any]) -> dict[str, Any]:
    return {**report, "stats": {k: v for k, v in report["stats"].items() if k != "elapsed_s"}}


def test_verify_on_the_cluster_reports_what_local_does(
    spark: SparkSession, cluster: BuiltCluster, standalone: SparkUp, tmp_path: Path
) -> None:
    root = tmp_path / "data"
    shutil.copytree(cluster.root, root)
    expected = corrupt(cluster, root)
    report_path = tmp_path / "cluster-report.json"
    done = run_ketch(
        *("verify", str(root), "--master", standalone.master_url, "--json", str(report_path)),
        *SMALL_JOB,
        cwd=tmp_path,
    )
    assert done.returncode == 1, described(done)  # findings
    on_cluster = json.loads(report_path.read_text())
    local = report_json(run_verify(spark, [str(root)]))
    assert len(on_cluster["findings"]) == len(expected), on_cluster["findings"]
    assert _untimed(on_cluster) == _untimed(local)
    _ran_on_both_workers(standalone, "ketch-verify")


def _staged(staging: Path) -> dict[str, dict[str, str]]:
    """Per staged partition dir, the digest of each of its files."""
    return {
        directory.name: {
            f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in directory.iterdir()
        }
        for directory in staging.iterdir()
        if directory.is_dir()
    }


def _now_of(staging: Path) -> int:
    """The `now` a first pass ran at: every delete horizon it set is now + delete.retention.ms."""
    horizons = {
        header.base_timestamp
        for directory in staging.iterdir()
        for header, _ in read_partition(directory)
        if header.has_delete_horizon
    }
    assert len(horizons) == 1, horizons
    return horizons.pop() - RETENTION_MS


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _unplaced(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in ("elapsed_s", "staging_dir")}


def test_compact_on_the_cluster_stages_what_local_does(
    spark: SparkSession, standalone: SparkUp, tmp_path: Path
) -> None:
    broker = build_broker_dir(tmp_path, SEED, partitions=PARTITIONS, keys=25)
    build_transactional_partition(broker.data_dir, PARTITIONS, SEED)
    (tmp_path / "topic-configs.json").write_text(json.dumps({TOPIC: COMPACT_PROPS}))
    sources = _files(broker.data_dir)
    cluster_staging, summary_path = tmp_path / "staged-cluster", tmp_path / "cluster.json"
    done = run_ketch(
        *("compact", str(broker.data_dir), "--topic", TOPIC, "--master", standalone.master_url),
        *("--staging-dir", str(cluster_staging), "--json", str(summary_path), *SMALL_JOB),
        cwd=tmp_path,
    )
    assert done.returncode == 0, described(done)
    on_cluster = json.loads(summary_path.read_text())
    local_staging = tmp_path / "staged-local"
    now_ms = _now_of(cluster_staging)
    result = run_compact(spark, broker.data_dir, TOPIC, now_ms=now_ms, staging_dir=local_staging)
    assert len(result.partitions) == PARTITIONS + 1, f"seed {SEED}: nothing to compact"
    assert _unplaced(on_cluster) == _unplaced(summary_json(result))
    staged = _staged(cluster_staging)
    assert sorted(staged) == [f"{TOPIC}-{p}" for p in range(PARTITIONS + 1)]
    assert all(any(name.endswith(".log") for name in files) for files in staged.values())
    assert staged == _staged(local_staging)
    # Staged only: the broker's own files are untouched.
    assert _files(broker.data_dir) == sources
    _ran_on_both_workers(standalone, "ketch compact")
