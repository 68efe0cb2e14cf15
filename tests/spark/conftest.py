"""One SparkSession (local[2], built by `offline.spark_session.build_session`) for every Spark
test: starting the JVM costs 5-10 s, so the session lives as long as the test session. The
3-broker cluster data dir the data source and verify tests read is built once too (tests that
damage it work on a copy). The standalone cluster (`ketch spark up`, a master and two workers)
is started on first use, by the tests that run jobs on it, and stopped with Ctrl-C at the end,
as a person would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from offline.spark_session import build_session
from tests.spark.standalone_cli import SparkUp
from tests.unit.offline.helpers import BuiltCluster, build_cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", "ketch-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> BuiltCluster:
    return build_cluster(tmp_path_factory.mktemp("cluster") / "data", seed=8)


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkUp]:
    up = SparkUp.start(tmp_path_factory.mktemp("standalone"), workers=2)
    yield up
    # Stopping is part of what is tested: Ctrl-C ends the command cleanly, the master stops
    # answering and no daemon or executor is left.
    code = up.stop()
    assert code == 0, (up.work_dir / "spark-up.err").read_text()
    assert not up.answers()
    assert up.daemons_left() == []
