"""Samples the cluster's state into the run's history at every quiescent point.

The simulated loop calls `sample(now_ns)` each time virtual time moves (loop.py): every ready
callback has run, so the cluster is between events. The observer reads only published state
(each running broker's partition views, the controller's model) and appends what changed: a
replica that became leader in an epoch (`LeaderClaim`), a replica's new high watermark
(`HighWatermark`), a replica's new log end offset, or -1 once it is no longer observed (`LogEnd`),
a new committed partition state (`IsrChange`), a new controller epoch. It also stamps each write
the workload recorded as attempted since the last quiescent point with the time of the step it
was recorded in (`History.attempted_at`: the workload records attempts without a time). The checkers
(checkers.py) then judge the sequences: one leader per epoch, HWs that never go down within a
leadership, ISRs never empty, controller epochs that only rise, every acks=all write held by
min.insync.replicas replicas before it was acknowledged.

A sample taken as time moves to `now_ns` shows the cluster at the end of the time step before
(all of that step's work done). Leader claims, high watermarks, ISRs and controller epochs carry
`now_ns`; log ends and attempt stamps carry the time of the step they show (the previous
sample's `now_ns`), so that they and the workload's own records (an `Ack`'s time is the clock's
when the answer came) agree on when things happened: the acks=all check (checkers.py) compares
them, and a log end reached in the step of an answer must count as before it.

Ownership: one observer per run; it never changes what it reads.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable

from actors.views import Role
from testkit.cluster import Cluster
from testkit.sim.history import (
    ControllerEpoch,
    HighWatermark,
    History,
    IsrChange,
    LeaderClaim,
    LogEnd,
)
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
        # Replicas observed at the last sample, with their log end offsets.
        self._log_ends: dict[tuple[int, int, TopicPartition], int] = {}
        self._attempts_seen = 0
        self._step_ns = 0  # the time of the step the next sample shows
        self._states: dict[TopicPartition, tuple[int, int, int, tuple[int, ...]]] = {}
        self._controller_epoch = -1
        self.samples = 0

    def sample(self, now_ns: int) -> None:
        self.samples += 1
        cluster = self.cluster
        history = self.history
        partitions = list(self._partitions())
        shown_ns, self._step_ns = self._step_ns, now_ns
        self._stamp_attempts(shown_ns)
        observed = 0  # replicas seen now; each is a key of `_log_ends`
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
                observed += 1
                end = view.log_end_offset.message_offset
                if self._log_ends.get(key) != end:
                    self._log_ends[key] = end
                    history.append_log_end(LogEnd(broker_id, incarnation, tp, end, shown_ns))
        if observed != len(self._log_ends):
            self._forget_unobserved(partitions, shown_ns)
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

    def _stamp_attempts(self, shown_ns: int) -> None:
        attempted = self.history.attempted
        if len(attempted) == self._attempts_seen:
            return
        # `attempted` only grows, in insertion order (a value recorded again keeps its place).
        for value in itertools.islice(attempted, self._attempts_seen, None):
            self.history.set_attempted_at(value, shown_ns)
        self._attempts_seen = len(attempted)

    def _forget_unobserved(self, partitions: list[TopicPartition], shown_ns: int) -> None:
        """A replica seen last time and not now (its broker stopped or restarted, its partition
        deleted or no longer hosted) holds nothing from now on: one -1 sample says so. Called
        only when some key of `_log_ends` was not seen now (every one seen is a key, so fewer
        seen than keys), so the common sample pays nothing."""
        cluster = self.cluster
        sampled = set(partitions)
        for key in list(self._log_ends):
            broker_id, incarnation, tp = key
            seen = (
                tp in sampled
                and cluster.running(broker_id)
                and self.incarnations[broker_id] == incarnation
                and cluster.nodes[broker_id].replica_manager.partition(tp) is not None
            )
            if not seen:
                del self._log_ends[key]
                self.history.append_log_end(LogEnd(broker_id, incarnation, tp, -1, shown_ns))
