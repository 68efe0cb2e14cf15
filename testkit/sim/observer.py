"""Samples the cluster's state into the run's history at every quiescent point.

The simulated loop calls `sample(now_ns)` each time virtual time moves (loop.py): every ready
callback has run, so the cluster is between events. The observer reads only published state
(each running broker's partition views, the controller's model) and appends what changed: a
replica that became leader in an epoch (`LeaderClaim`), a replica's new high watermark
(`HighWatermark`), a new committed partition state (`IsrChange`), a new controller epoch. The
checkers (checkers.py) then judge the sequences: one leader per epoch, HWs that never go down
within a leadership, ISRs never empty, controller epochs that only rise.

Ownership: one observer per run; it never changes what it reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from actors.views import Role
from testkit.cluster import Cluster
from testkit.sim.history import ControllerEpoch, HighWatermark, History, IsrChange, LeaderClaim
from wire.topic import TopicPartition


class Observer:
    def __init__(
        self,
        cluster: Cluster,
        history: History,
        incarnations: Counter[int],
        partitions: Callable[[], Iterable[TopicPartition]],
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.incarnations = incarnations
        self._partitions = partitions
        self._leaders: set[tuple[int, int, TopicPartition, int]] = set()
        self._hws: dict[tuple[int, int, TopicPartition], tuple[int, int]] = {}
        self._states: dict[TopicPartition, tuple[int, int, int, tuple[int, ...]]] = {}
        self._controller_epoch = -1
        self.samples = 0

    def sample(self, now_ns: int) -> None:
        self.samples += 1
        cluster = self.cluster
        history = self.history
        partitions = list(self._partitions())
        for broker_id, node in cluster.nodes.items():
            if not cluster.running(broker_id):
                continue
            incarnation = self.incarnations[broker_id]
            manager = node.replica_manager
            for tp in partitions:
                actor = manager.partition(tp)
                if actor is None:
                    continue
                view = actor.view
                if view.role is Role.LEADER:
                    claim = (broker_id, incarnation, tp, view.leader_epoch)
                    if claim not in self._leaders:
                        self._leaders.add(claim)
                        history.append_leader_claim(
                            LeaderClaim(broker_id, incarnation, tp, view.leader_epoch, now_ns)
                        )
                hw = view.high_watermark.message_offset
                key = (broker_id, incarnation, tp)
                if self._hws.get(key) != (view.leader_epoch, hw):
                    self._hws[key] = (view.leader_epoch, hw)
                    history.append_high_watermark(
                        HighWatermark(broker_id, incarnation, tp, view.leader_epoch, hw, now_ns)
                    )
        controller = cluster.controller
        if not controller.actor.running:
            return
        model = controller.actor.model
        if model.controller_epoch != self._controller_epoch:
            self._controller_epoch = model.controller_epoch
            history.append_controller_epoch(ControllerEpoch(model.controller_epoch, now_ns))
        for tp in partitions:
            record = model.partition_by_name(tp)
            if record is None:
                continue
            state = (record.leader, record.leader_epoch, record.partition_epoch, record.isr)
            if self._states.get(tp) != state:
                self._states[tp] = state
                history.append_isr_change(
                    IsrChange(
                        tp,
                        record.leader,
                        record.leader_epoch,
                        record.partition_epoch,
                        tuple(record.isr),
                        now_ns,
                    )
                )
