"""The observer's log-end samples and attempt stamps, on a stand-in cluster: a change is
recorded once, a replica no longer seen gets one -1, a restarted broker starts a new
incarnation, and each attempt gets the time of the step it was recorded in."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from actors.views import Role
from runtime.log.offsets import LogOffsetMetadata
from testkit.cluster import Cluster
from testkit.sim.history import History, LogEnd
from testkit.sim.observer import Observer
from wire.topic import TopicPartition

TP = TopicPartition("t", 0)


@dataclass
class _View:
    log_end: int
    role: Role = Role.FOLLOWER
    leader_epoch: int = 1

    @property
    def log_end_offset(self) -> LogOffsetMetadata:
        return LogOffsetMetadata(self.log_end)

    @property
    def high_watermark(self) -> LogOffsetMetadata:
        return LogOffsetMetadata(0)


@dataclass
class _Actor:
    view: _View


@dataclass
class _ReplicaManager:
    actors: dict[TopicPartition, _Actor] = field(default_factory=dict)

    def partition(self, tp: TopicPartition) -> _Actor | None:
        return self.actors.get(tp)


@dataclass
class _Node:
    replica_manager: _ReplicaManager = field(default_factory=_ReplicaManager)


@dataclass
class _ControllerActor:
    running: bool = False


@dataclass
class _Controller:
    actor: _ControllerActor = field(default_factory=_ControllerActor)


@dataclass
class _Cluster:
    nodes: dict[int, _Node]
    stopped: set[int] = field(default_factory=set)
    controller: _Controller = field(default_factory=_Controller)

    def running(self, broker_id: int) -> bool:
        return broker_id not in self.stopped

    def host(self, broker_id: int, log_end: int) -> _View:
        view = _View(log_end)
        self.nodes[broker_id].replica_manager.actors[TP] = _Actor(view)
        return view


def observed() -> tuple[_Cluster, History, Counter[int], Observer]:
    cluster = _Cluster({0: _Node(), 1: _Node()})
    history = History(seed=5)
    incarnations: Counter[int] = Counter()
    observer = Observer(cast(Cluster, cluster), history, incarnations, lambda: [TP])
    return cluster, history, incarnations, observer


def test_log_ends_are_recorded_when_they_change_and_end_with_minus_one() -> None:
    cluster, history, incarnations, observer = observed()
    leader = cluster.host(0, 3)
    cluster.host(1, 2)
    observer.sample(10)
    observer.sample(20)  # nothing changed: nothing recorded
    leader.log_end = 5
    observer.sample(30)
    cluster.stopped.add(1)  # broker 1 dies
    observer.sample(40)
    observer.sample(50)
    cluster.stopped.discard(1)  # and comes back as a new incarnation
    incarnations[1] += 1
    cluster.host(1, 1)
    observer.sample(60)
    del cluster.nodes[0].replica_manager.actors[TP]  # broker 0 no longer hosts it
    observer.sample(70)
    # Each sample shows the step before it: stamped with the previous sample's time.
    assert history.log_ends == [
        LogEnd(0, 0, TP, 3, 0),
        LogEnd(1, 0, TP, 2, 0),
        LogEnd(0, 0, TP, 5, 20),
        LogEnd(1, 0, TP, -1, 30),
        LogEnd(1, 1, TP, 1, 50),
        LogEnd(0, 0, TP, -1, 60),
    ]


def test_a_restart_between_two_samples_still_closes_the_old_incarnation() -> None:
    cluster, history, incarnations, observer = observed()
    cluster.host(0, 3)
    observer.sample(10)
    incarnations[0] += 1  # killed and restarted within one time step
    observer.sample(20)
    assert history.log_ends == [
        LogEnd(0, 0, TP, 3, 0),
        LogEnd(0, 1, TP, 3, 10),
        LogEnd(0, 0, TP, -1, 10),
    ]


def test_each_attempt_is_stamped_with_the_time_of_its_step() -> None:
    _, history, _, observer = observed()
    history.append_attempt("p1", b"a", idempotent=False)  # in the step at 0
    observer.sample(10)
    history.append_attempt("p1", b"b", idempotent=False)  # in the step at 10
    history.append_attempt("p1", b"a", idempotent=False)  # recorded again: keeps its stamp
    history.append_attempt("p1", b"c", idempotent=False)
    observer.sample(20)
    observer.sample(30)
    assert history.attempted_at == {b"a": 0, b"b": 10, b"c": 10}
