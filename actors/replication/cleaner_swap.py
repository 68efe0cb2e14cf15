"""The broker's log cleaner hands its passes to the partition actors: the `SwapSink` that sends
`SwapCleaned` to the actor owning the cleaned log (runtime/log/cleaner/cleaner.py says what the
cleaner does with the answer). A partition without an actor, or whose actor stopped or failed
meanwhile, discards the pass: its log is no longer the one that was cleaned, or has no owner to
swap it in. Stateless; runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.replication.partition import PartitionActor
from actors.replication.partition_messages import SwapCleaned
from runtime.actor import ActorFatalError, MailboxClosed
from runtime.log.cleaner.cleaner import SwapSink
from runtime.log.cleaner.swap import SwapOutcome
from runtime.log.cleaner.task import CleanedRange, CleaningTask
from wire.topic import TopicPartition


def partition_swap_sink(
    partition: Callable[[TopicPartition], PartitionActor | None],
) -> SwapSink:
    """A `SwapSink` over the ReplicaManager's routing (`partition`: its lookup)."""

    async def swap(task: CleaningTask, cleaned: CleanedRange) -> SwapOutcome:
        actor = partition(task.topic_partition)
        if actor is None:
            return SwapOutcome(False, "no partition actor hosts the log any more")
        try:
            return await actor.ask(SwapCleaned(task, cleaned))
        except (MailboxClosed, ActorFatalError) as exc:
            return SwapOutcome(False, f"the partition actor stopped: {exc}")

    return swap
