"""runtime/metrics/registry.py: the metrics.port property, and one registry per node (never
the process-wide default), so each node reports only its own numbers."""

from __future__ import annotations

import pytest

from node.broker.config import BrokerConfig, property_defaults
from runtime.metrics.registry import METRICS_DISABLED, metrics_port
from tests.unit.runtime.metrics.helpers import broker_metrics, samples, value


def test_metrics_port_property() -> None:
    assert metrics_port({}) == METRICS_DISABLED
    assert metrics_port({"metrics.port": "9300"}) == 9300
    assert metrics_port({"metrics.port": 0}) == 0
    for bad in (70_000, -2, True, "http"):
        with pytest.raises(ValueError, match=r"metrics\.port"):
            metrics_port({"metrics.port": bad})
    assert BrokerConfig.from_properties({"broker.id": 1}).metrics_port == METRICS_DISABLED
    assert BrokerConfig.from_properties({"broker.id": 1, "metrics.port": 9301}).metrics_port == 9301
    assert property_defaults()["metrics.port"] == METRICS_DISABLED


async def test_each_node_has_its_own_registry() -> None:
    first, second = broker_metrics([]), broker_metrics([])
    first.isr_changes.mark_expand()
    assert value(samples(await first.scrape()), "kafka_server_replicamanager_isrexpands_total") == 1
    assert (
        value(samples(await second.scrape()), "kafka_server_replicamanager_isrexpands_total") == 0
    )
