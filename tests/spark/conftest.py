"""One SparkSession (local[2], built by `offline.spark_session.build_session`) for every Spark
test: starting the JVM costs 5-10 s, so the session lives as long as the test session. The
3-broker cluster data dir the data source and verify tests read is built once too (tests that
damage it work on a copy)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from offline.spark_session import build_session
from tests.unit.offline.helpers import BuiltCluster, build_cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", "ketch-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> BuiltCluster:
    return build_cluster(tmp_path_factory.mktemp("cluster") / "data", seed=8)
