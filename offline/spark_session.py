"""Building the SparkSession the offline jobs (verify, compact) run in.

One place decides how ketch talks to Spark, so the jobs run unchanged on a cluster by changing the
master URL (with the `ketch` package importable on the executors, e.g. ``spark-submit
--py-files``, and the data dirs on a shared file system):

* the Python workers run the driver's interpreter (``PYSPARK_PYTHON`` = ``sys.executable``
  unless set), so they import the same `offline`, `wire` and `runtime` packages;
* ``SPARK_LOCAL_IP`` defaults to 127.0.0.1, so a local run needs no resolvable host name;
* no web UI and no console progress bars (these jobs are command-line tools), few shuffle
  partitions (the grouped data is per partition and small), quiet logging;
* the "ketch" data source is registered.

The session is process-wide (Spark's `getOrCreate`); the caller stops it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from pyspark.sql import SparkSession

DEFAULT_MASTER: Final = "local[2]"
_BASE_CONF: Final = MappingProxyType(
    {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Python workers are reused across tasks: the data source's imports are paid once.
        "spark.python.worker.reuse": "true",
    }
)


def build_session(
    master: str = DEFAULT_MASTER,
    app_name: str = "ketch",
    conf: Mapping[str, str] = MappingProxyType({}),
    driver_memory: str | None = None,
) -> SparkSession:
    """A SparkSession on `master` with ketch's settings; `conf` entries override them."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(_BASE_CONF)
    if driver_memory is not None:
        # Only effective before the driver JVM starts, i.e. for the first session of a process.
        settings["spark.driver.memory"] = driver_memory
    settings.update(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session: SparkSession = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    from offline.datasource import register  # here: datasource imports pyarrow and the engine

    register(session)
    return session
