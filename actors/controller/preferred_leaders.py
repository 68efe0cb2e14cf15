"""When the controller gives partitions their preferred leaders back after their preferred
replicas return (issue 23: leaders spread after a restart).

Kafka restores preferred leaders only on its periodic check (auto.leader.rebalance.enable, every
leader.imbalance.check.interval.seconds: 300 s), so after a broker restarts — a `ketch up`
restart, a crash, a controlled shutdown — every partition it led stays led by the others for up
to five minutes. KRaft's QuorumController behaves alike: its balancing pass is deferred by that
interval. ketch keeps the check (actors/controller/elections.py, `rebalance`) and adds a prompt
path, driven by the event that makes a preferred election possible at all: an AlterPartition
that adds a partition's preferred replica (its first assigned one) back to the ISR while another
broker leads (actors/controller/alter_partition.py calls `rejoined`).

The schedule, with D = leader.imbalance.election.delay.ms:

- The first such partition arms one alarm, D from now; partitions that rejoin meanwhile join
  the same pass. When the alarm rings it tells the actor `ElectPreferredLeaders`, whose handler
  `take`s every pending partition and runs the existing preferred election on each
  (elections.py, `elect_rejoined`): the preferred replica leads under a new leader epoch with the
  ISR unchanged, if at that moment it is still in the ISR, live, not shutting down and not in a
  failed log dir, and the partition still has another leader. So each partition is elected
  within D of its replica's return, and the passes — one metadata commit and one round of
  LeaderAndIsr each — are at most one per D, however many partitions return.
- No ping-pong: the next window opens only on a return after the pass has taken the pending
  partitions, so two preferred elections of one partition are always at least D apart; a
  replica that keeps dropping out of the ISR is checked again only on its next return.
- Nothing is kept across a controller restart: a restarted controller gives the brokers its
  log says are live a grace session before it knows they are, and elects nobody for them until
  a leader reports one back in an ISR (it fetches, so it is alive); the periodic check covers
  what was pending.
- Off (nothing is ever pending) unless auto.leader.rebalance.enable, and with D = -1.

leader.imbalance.per.broker.percentage applies to the periodic check only: a returning replica
is one partition's imbalance, not a broker's (KRaft ignores the percentage altogether).

Owner: the controller actor. It builds the one schedule and calls it only from its own handlers
(through actors/controller/context.py) and from `on_stop`; the alarm's callback runs on the event
loop between the actor's awaits and only tells the actor a message that is never dropped, so
nothing here needs a lock. The pending partitions are bounded by the partitions that exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from actors.controller.messages import ElectPreferredLeaders
from runtime.clock import NS_PER_MS, Alarm, Clock
from wire.topic import TopicPartition


class PreferredLeaderSchedule:
    """The partitions waiting for a preferred election, and the one alarm that starts it."""

    def __init__(
        self,
        clock: Clock,
        delay_ms: int | None,
        tell: Callable[[ElectPreferredLeaders], None],
    ) -> None:
        """`delay_ms` None: the prompt path is off and nothing is ever pending."""
        assert delay_ms is None or delay_ms >= 1, delay_ms
        self._clock = clock
        self._delay_ms = delay_ms
        self._tell = tell  # the actor's: never drops the message, never blocks
        # Insertion-ordered (a dict, not a set) so the pass writes its records in the order the
        # replicas returned, the same in every run of a seed.
        self._pending: dict[TopicPartition, None] = {}
        # The armed alarm, kept until the pass has run (not only until it rang), so a return
        # between the ring and the pass joins that pass rather than arming an earlier window.
        self._alarm: Alarm | None = None

    @property
    def enabled(self) -> bool:
        return self._delay_ms is not None

    @property
    def pending(self) -> tuple[TopicPartition, ...]:
        return tuple(self._pending)

    @property
    def armed(self) -> bool:
        return self._alarm is not None

    def rejoined(self, partitions: Iterable[TopicPartition]) -> None:
        """These partitions' preferred replicas are back in their ISRs (committed)."""
        if self._delay_ms is None:
            return
        for tp in partitions:
            self._pending[tp] = None
        if self._pending and self._alarm is None:
            deadline_ns = self._clock.monotonic_ns() + self._delay_ms * NS_PER_MS
            self._alarm = self._clock.call_at_ns(deadline_ns, self._ring)

    def take(self) -> list[TopicPartition]:
        """The pass runs now: every pending partition, and the next return opens a new window."""
        taken = list(self._pending)
        self._pending.clear()
        if self._alarm is not None:
            self._alarm.cancel()  # a no-op once it rang; a pass run early owns the window too
            self._alarm = None
        return taken

    def close(self) -> None:
        """The controller stops: the alarm may tell it nothing any more."""
        self.take()

    def _ring(self) -> None:
        self._tell(ElectPreferredLeaders())
