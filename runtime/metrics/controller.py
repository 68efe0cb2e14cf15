"""The controller's metrics (`ControllerMetrics`), refreshed by one `ask` to the controller actor
per scrape (a snapshot, never a read of the actor's fields):

    kafka_controller_kafkacontroller_activecontrollercount   gauge (1)
    kafka_controller_kafkacontroller_offlinepartitionscount  gauge
    kafka_controller_kafkacontroller_activebrokercount       gauge
    kafka_controller_kafkacontroller_fencedbrokercount       gauge
    kafka_controller_controllerstats_uncleanleaderelections_total counter
    ketch_controller_epoch                                   gauge

plus the mailbox depths (`registry.mailbox_metrics`). Owned by the controller node; every method
runs on its loop thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from runtime.metrics.registry import MailboxSource, NodeMetrics, counter, gauge, mailbox_metrics


@dataclass(frozen=True, slots=True)
class ControllerGauges:
    """One snapshot of the controller's state, taken by the controller actor."""

    controller_epoch: int
    offline_partitions: int
    active_brokers: int
    fenced_brokers: int
    unclean_elections: int


class ControllerMetrics(NodeMetrics):
    """The controller's metrics: `snapshot` is awaited once per scrape (an `ask` to the
    controller actor), and the collectors report the last snapshot."""

    def __init__(
        self,
        snapshot: Callable[[], Awaitable[ControllerGauges]],
        mailboxes: MailboxSource,
    ) -> None:
        super().__init__()
        self._snapshot = snapshot
        self.last: ControllerGauges | None = None
        self.add_refresh(self._refresh)
        self.add_collector(self._controller_metrics)
        self.add_collector(lambda: mailbox_metrics(mailboxes()))

    async def _refresh(self) -> None:
        self.last = await self._snapshot()

    def _controller_metrics(self) -> Iterable[Metric]:
        last = self.last
        if last is None:
            return []  # nothing known yet: better absent than a made-up zero
        prefix = "kafka_controller_kafkacontroller_"
        return [
            gauge(prefix + "activecontrollercount", "1 on the active controller", 1),
            gauge(
                prefix + "offlinepartitionscount",
                "Partitions without a leader",
                last.offline_partitions,
            ),
            gauge(
                prefix + "activebrokercount", "Registered, unfenced brokers", last.active_brokers
            ),
            gauge(prefix + "fencedbrokercount", "Registered, fenced brokers", last.fenced_brokers),
            counter(
                "kafka_controller_controllerstats_uncleanleaderelections",
                "Leaders elected from outside the ISR",
                last.unclean_elections,
            ),
            gauge("ketch_controller_epoch", "The active controller's epoch", last.controller_epoch),
        ]
