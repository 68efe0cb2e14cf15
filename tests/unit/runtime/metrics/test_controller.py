"""runtime/metrics/controller.py: the controller's gauges under Kafka's names, from the last
snapshot the controller actor answered, and absent until it first answers."""

from __future__ import annotations

from runtime.metrics.controller import ControllerGauges, ControllerMetrics
from tests.unit.runtime.metrics.helpers import samples, stats, value


async def test_controller_metrics_report_the_last_snapshot() -> None:
    snapshots = [ControllerGauges(3, 2, 4, 1, 1)]

    async def snapshot() -> ControllerGauges:
        if not snapshots:
            raise RuntimeError("the controller actor stopped")
        return snapshots.pop(0)

    metrics = ControllerMetrics(snapshot, lambda: [("Controller", stats("c", 0))])
    assert metrics.last is None
    parsed = samples(await metrics.scrape())
    kc = "kafka_controller_kafkacontroller_"
    assert value(parsed, kc + "activecontrollercount") == 1
    assert value(parsed, kc + "offlinepartitionscount") == 2
    assert value(parsed, kc + "activebrokercount") == 4
    assert value(parsed, kc + "fencedbrokercount") == 1
    assert value(parsed, "kafka_controller_controllerstats_uncleanleaderelections_total") == 1
    assert value(parsed, "ketch_controller_epoch") == 3
    assert value(parsed, "ketch_actors", kind="Controller") == 1
    # The actor cannot answer (stopping): the scrape still succeeds with the last values.
    assert samples(await metrics.scrape()) == parsed


async def test_controller_metrics_absent_until_a_snapshot_arrives() -> None:
    async def failing() -> ControllerGauges:
        raise RuntimeError("not started")

    parsed = samples(await ControllerMetrics(failing, list).scrape())
    assert not [k for k in parsed if k[0].startswith("kafka_controller")]
