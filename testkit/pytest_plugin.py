"""The `ketch_cluster` pytest fixture: a real ketch cluster behind fault-injecting proxies for
each test that asks for it (testkit/testing.py has the API).

    # conftest.py
    pytest_plugins = ["testkit.pytest_plugin"]

    # test_orders.py
    @pytest.fixture
    def ketch_cluster_options() -> dict[str, object]:
        return {"brokers": 3, "properties": {"min.insync.replicas": 2}}

    async def test_orders_survive_a_broker_crash(ketch_cluster: KetchCluster) -> None:
        ...

`ketch_cluster_options` holds `testing.ketch_cluster`'s keyword arguments (brokers, kafka,
properties); override it in a module or conftest, or parametrize it, to change them. By default:
three brokers with Kafka listeners and FAILOVER_PROPERTIES. (A fixture rather than a marker: a
marker must be registered before the test modules are imported, which `pytest_plugins` in a
test module is too late for.) The cluster lives in the test's `tmp_path` (`ketch/`, node logs in
`ketch/logs/`), which pytest keeps for the last runs, so a failed test's logs can be read
afterwards. Async fixture: pytest-asyncio runs it on the test's event loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from testkit import testing


@pytest.fixture
def ketch_cluster_options() -> dict[str, Any]:
    """`testing.ketch_cluster`'s keyword arguments for the `ketch_cluster` fixture."""
    return {}


@pytest_asyncio.fixture
async def ketch_cluster(
    ketch_cluster_options: dict[str, Any], tmp_path: Path
) -> AsyncIterator[testing.KetchCluster]:
    async with testing.ketch_cluster(root=tmp_path / "ketch", **ketch_cluster_options) as cluster:
        yield cluster
