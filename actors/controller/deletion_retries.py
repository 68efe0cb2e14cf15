"""When the controller tries a failed replica deletion again (issue 18, finding 7).

A live broker that answers StopReplica(delete) with an error (a log directory it could not
remove, a request refused whole) leaves its replicas ReplicaDeletionIneligible. Kafka retries
those only on the next controller event that resumes deletions — for ketch that is the broker
registering again or the controller restarting, so a live broker's failed deletion would stall
its topic, and the topic's name, indefinitely. Instead each such broker gets one alarm on the
injected clock: after an exponential backoff (`DELETION_RETRY_BACKOFF`: bounded, with jitter
drawn from the controller's seeded random source, so a run replays from its seed) the alarm
tells the controller a `RetryReplicaDeletion`, and actors/controller/topic_deletion.py sends
the ineligible replicas' StopReplica(delete) again. The backoff grows with each failed round
and starts over once the broker has nothing left to delete; a broker that dies or registers
again is forgotten (its alarm cancelled), because its re-registration resends the deletions.

At most one alarm per broker is pending, so the alarms are bounded by the number of brokers.

Owner: the controller actor. It builds the one `DeletionRetries` and calls it only from its own
handlers (through actors/controller/context.py) and from `on_stop`; the alarms' callbacks run on
the event loop between the actor's awaits and only tell the actor a message, so nothing here
needs a lock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

from actors.controller.messages import RetryReplicaDeletion
from runtime.clock import NS_PER_MS, Alarm, Clock
from runtime.net.backoff import ExponentialBackoff

# A failed deletion is usually a broker-side I/O problem that takes a while to clear, so the
# first retry waits a second and the later ones up to half a minute, never longer.
DELETION_RETRY_BACKOFF: Final = ExponentialBackoff(initial_ms=1_000, max_ms=30_000)


class DeletionRetries:
    """Per live broker with failed deletions: the failed rounds so far and the pending alarm."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        tell: Callable[[RetryReplicaDeletion], None],
        backoff: ExponentialBackoff = DELETION_RETRY_BACKOFF,
    ) -> None:
        self._clock = clock
        self._rng = rng
        self._tell = tell  # the actor's: never drops the message, never blocks
        self._backoff = backoff
        self._alarms: dict[int, Alarm] = {}
        self._failed_rounds: dict[int, int] = {}

    def schedule(self, broker_id: int, broker_epoch: int) -> float | None:
        """A deletion on the broker failed: try again after the backoff, which is returned.
        None (nothing new) while a retry is already scheduled: one round of failures waits
        once."""
        if broker_id in self._alarms:
            return None
        rounds = self._failed_rounds.get(broker_id, 0)
        delay_ms = self._backoff.delay_ms(rounds, self._rng)
        self._failed_rounds[broker_id] = rounds + 1
        deadline_ns = self._clock.monotonic_ns() + round(delay_ms * NS_PER_MS)
        self._alarms[broker_id] = self._clock.call_at_ns(
            deadline_ns, lambda: self._due(broker_id, broker_epoch)
        )
        return delay_ms

    def done(self, broker_id: int) -> None:
        """The broker has nothing left to delete: the next failure starts the backoff over."""
        self._failed_rounds.pop(broker_id, None)

    def forget(self, broker_id: int) -> None:
        """The broker died or registered again: its re-registration resends the deletions."""
        alarm = self._alarms.pop(broker_id, None)
        if alarm is not None:
            alarm.cancel()
        self._failed_rounds.pop(broker_id, None)

    def close(self) -> None:
        """The controller stops: no alarm may tell it anything any more."""
        for broker_id in list(self._alarms):
            self.forget(broker_id)

    def _due(self, broker_id: int, broker_epoch: int) -> None:
        self._alarms.pop(broker_id, None)
        self._tell(RetryReplicaDeletion(broker_id, broker_epoch))
