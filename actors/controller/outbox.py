"""Request sending: what one controller event tells the brokers, and how it goes out (Kafka's
ControllerBrokerRequestBatch, over its ControllerChannelManager).

An `Outbox` collects, for one event, the partitions each broker must hear about in LeaderAndIsr
(FULL or INCREMENTAL), the partitions UpdateMetadata announces to every live broker, and the
replicas StopReplica stops or deletes. Once the event's records are committed,
`RequestSender.flush` builds the requests from the model as it now is (the per-partition states
come from actors/controller/requests.py) and hands them to the per-broker request channels
(actors/controller/channel.py): LeaderAndIsr first, then UpdateMetadata, then StopReplica —
Kafka's order, which the channels keep end to end. Brokers that are not live get nothing; they
receive their full state when they register again.

A StopReplica that deletes partitions carries a callback: the channel's answer comes back to the
controller as a `StopReplicaDone` message (handled by actors/controller/topic_deletion.py), so
it is acted on in the actor's own task, never in the channel's. Every LeaderAndIsr carries one
too: an answer with KAFKA_STORAGE_ERROR for some partition (its log dir failed on that broker)
comes back as a `LeaderAndIsrDone` (handled by actors/controller/replica_failure.py); other
answers are dropped in the channel's task, since they need nothing from the controller.
UpdateMetadata lists as offline the replicas of dead brokers and those in a failed log dir of a
live broker (the liveness table keeps them, actors/controller/sessions.py).

Owner: the controller actor. It holds one `RequestSender`, which also adds and removes the
channels' brokers as sessions open and close; an `Outbox` lives for one event's handler. Both
are used only from the actor's task, so no lock is needed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from actors.controller.journal import Change
from actors.controller.messages import LeaderAndIsrDone, StopReplicaDone
from actors.controller.model import ControllerModel
from actors.controller.requests import (
    acl_entries,
    client_quota_entries,
    leader_and_isr_state,
    live_broker_entries,
    live_leaders,
    native_address,
    scram_credential_entries,
    topic_configs,
    update_metadata_state,
)
from actors.controller.sessions import BrokerSessions
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    LEADER_AND_ISR_FULL,
    LEADER_AND_ISR_INCREMENTAL,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    Request,
    Response,
    StopReplicaPartitionState,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from wire.metadata_records import PartitionRecord
from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")

STOP_REPLICA_DELETING_EPOCH = -2  # StopReplica's leader epoch for a topic being deleted

ResponseCallback = Callable[[Response | None, int], None]


class RequestChannels(Protocol):
    """One ordered, retrying request channel per broker (actors/controller/channel.py)."""

    def add_broker(self, broker_id: int, address: Address) -> None: ...
    def remove_broker(self, broker_id: int) -> None: ...
    def send(
        self, broker_id: int, request: Request, callback: ResponseCallback | None = None
    ) -> None: ...


@dataclass
class Outbox:
    """What one event sends, per broker and kind; sent by `RequestSender.flush`."""

    leader_and_isr: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)
    full_leader_and_isr: set[int] = field(default_factory=set)
    metadata: set[TopicPartition] = field(default_factory=set)
    metadata_everything: bool = False
    # Every ACL to every live broker (the ACLs changed); an UpdateMetadata of everything
    # carries them too, so a broker that registers gets them.
    acls: bool = False
    # Every SCRAM credential to every live broker (they changed); an UpdateMetadata of
    # everything carries them too, so a broker that registers gets them.
    scram_credentials: bool = False
    # Every client quota to every live broker (they changed); likewise carried by an
    # UpdateMetadata of everything.
    client_quotas: bool = False
    stop_replica: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)

    def lead_or_follow(
        self, brokers: Iterable[int], tp: TopicPartition, *, is_new: bool = False
    ) -> None:
        for broker in brokers:
            self.leader_and_isr.setdefault(broker, {})[tp] = is_new
        self.metadata.add(tp)

    def refresh(self, broker: int, tp: TopicPartition) -> None:
        """LeaderAndIsr with the partition's current state to one broker whose view of it is
        behind (a refused AlterPartition); the other brokers are up to date, so no
        UpdateMetadata."""
        self.leader_and_isr.setdefault(broker, {}).setdefault(tp, False)

    def stop(self, broker: int, tp: TopicPartition, *, delete: bool) -> None:
        self.stop_replica.setdefault(broker, {})[tp] = delete


class RequestSender:
    """Fills outboxes from the model and sends them through the request channels."""

    def __init__(
        self,
        name: str,
        controller_id: int,
        model: ControllerModel,
        sessions: BrokerSessions,
        channels: RequestChannels,
        tell: Callable[[StopReplicaDone | LeaderAndIsrDone], None],
    ) -> None:
        self._name = name
        self._controller_id = controller_id
        self._model = model
        self._sessions = sessions
        self._channels = channels
        self._tell = tell  # the actor's: channel answers come back as messages

    # -- channels ---------------------------------------------------------------------------------

    def add_broker(self, broker_id: int) -> None:
        address = native_address(self._model, broker_id)
        if address is None:
            log.warning("%s: broker %d has no native listener", self._name, broker_id)
            return
        self._channels.add_broker(broker_id, Address(*address))

    def remove_broker(self, broker_id: int) -> None:
        self._channels.remove_broker(broker_id)

    # -- filling an outbox ------------------------------------------------------------------------

    def announce(self, change: Change, outbox: Outbox) -> None:
        """LeaderAndIsr for every changed partition to its live replicas (not to one in a
        failed log dir: it would only answer KAFKA_STORAGE_ERROR again)."""
        live = self._sessions.live()
        for p in change.changed_partitions():
            tp = self._model.topic_partition(p)
            online = [
                r for r in p.replicas if r in live and not self._sessions.is_replica_offline(r, tp)
            ]
            outbox.lead_or_follow(online, tp)

    def send_full_state(self, outbox: Outbox, broker_id: int) -> None:
        """Everything `broker_id` hosts, as a FULL LeaderAndIsr (it drops what is not listed)."""
        outbox.full_leader_and_isr.add(broker_id)
        outbox.leader_and_isr.setdefault(broker_id, {})
        for p in self._model.partitions_hosted_on(broker_id):
            if not self._model.is_queued_for_deletion(p.topic_id):
                outbox.leader_and_isr[broker_id][self._model.topic_partition(p)] = False

    # -- sending ----------------------------------------------------------------------------------

    def flush(self, outbox: Outbox) -> None:
        live = self._sessions.live()
        self._send_leader_and_isr(outbox, live)
        if (
            outbox.metadata_everything
            or outbox.metadata
            or outbox.acls
            or outbox.scram_credentials
            or outbox.client_quotas
        ):
            self._send_update_metadata(outbox, live)
        self._send_stop_replica(outbox, live)

    def _send_leader_and_isr(self, outbox: Outbox, live: set[int]) -> None:
        model = self._model
        for broker_id, tps in sorted(outbox.leader_and_isr.items()):
            if broker_id not in live:
                continue
            partitions = [p for tp in tps if (p := model.partition_by_name(tp)) is not None]
            broker = model.broker(broker_id)
            assert broker is not None, broker_id
            full = broker_id in outbox.full_leader_and_isr
            self._channels.send(
                broker_id,
                LeaderAndIsrRequest(
                    controller_id=self._controller_id,
                    controller_epoch=model.controller_epoch,
                    broker_epoch=broker.broker_epoch,
                    type=LEADER_AND_ISR_FULL if full else LEADER_AND_ISR_INCREMENTAL,
                    partition_states=[
                        leader_and_isr_state(model, p, is_new=tps[model.topic_partition(p)])
                        for p in partitions
                    ],
                    live_leaders=live_leaders(model, partitions, live),
                    topic_configs=topic_configs(model, (tp.topic for tp in tps)),
                ),
                self._leader_and_isr_callback(broker_id, broker.broker_epoch),
            )

    def _send_update_metadata(self, outbox: Outbox, live: set[int]) -> None:
        model = self._model
        if outbox.metadata_everything:
            partitions = model.all_partitions()
        else:
            partitions = [
                p for tp in outbox.metadata if (p := model.partition_by_name(tp)) is not None
            ]
        states = [
            update_metadata_state(model, p, live, self._offline_replicas(p)) for p in partitions
        ]
        brokers = live_broker_entries(model, live, self._sessions.shutting_down())
        configs = topic_configs(model, (s.topic_name for s in states))
        acls = acl_entries(model) if outbox.acls or outbox.metadata_everything else None
        scram = (
            scram_credential_entries(model)
            if outbox.scram_credentials or outbox.metadata_everything
            else None
        )
        quotas = (
            client_quota_entries(model)
            if outbox.client_quotas or outbox.metadata_everything
            else None
        )
        for broker_id in sorted(live):
            broker = model.broker(broker_id)
            assert broker is not None, broker_id
            self._channels.send(
                broker_id,
                UpdateMetadataRequest(
                    controller_id=self._controller_id,
                    controller_epoch=model.controller_epoch,
                    broker_epoch=broker.broker_epoch,
                    partition_states=states,
                    live_brokers=brokers,
                    topic_configs=configs,
                    acls=acls,
                    scram_credentials=scram,
                    client_quotas=quotas,
                ),
            )

    def _send_stop_replica(self, outbox: Outbox, live: set[int]) -> None:
        for broker_id, stops in sorted(outbox.stop_replica.items()):
            broker = self._model.broker(broker_id)
            if broker_id not in live or broker is None:
                continue
            deleting = any(stops.values())
            self._channels.send(
                broker_id,
                StopReplicaRequest(
                    controller_id=self._controller_id,
                    controller_epoch=self._model.controller_epoch,
                    broker_epoch=broker.broker_epoch,
                    partition_states=[
                        StopReplicaPartitionState(
                            topic_name=tp.topic,
                            partition_index=tp.partition,
                            leader_epoch=STOP_REPLICA_DELETING_EPOCH if delete else -1,
                            delete_partition=delete,
                        )
                        for tp, delete in sorted(stops.items())
                    ],
                ),
                (
                    self._deletion_callback(
                        broker_id,
                        broker.broker_epoch,
                        tuple(tp for tp, delete in sorted(stops.items()) if delete),
                    )
                    if deleting
                    else None
                ),
            )

    def _offline_replicas(self, p: PartitionRecord) -> list[int]:
        tp = self._model.topic_partition(p)
        return [r for r in p.replicas if self._sessions.is_replica_offline(r, tp)]

    def _leader_and_isr_callback(self, broker_id: int, broker_epoch: int) -> ResponseCallback:
        def done(response: Response | None, attempts: int) -> None:
            if not isinstance(response, LeaderAndIsrResponse) or not any(
                e.error_code == ErrorCode.KAFKA_STORAGE_ERROR for e in response.partition_errors
            ):
                return
            with contextlib.suppress(Exception):
                self._tell(LeaderAndIsrDone(broker_id, broker_epoch, response))

        return done

    def _deletion_callback(
        self, broker_id: int, broker_epoch: int, partitions: tuple[TopicPartition, ...]
    ) -> ResponseCallback:
        def done(response: Response | None, attempts: int) -> None:
            with contextlib.suppress(Exception):
                self._tell(StopReplicaDone(broker_id, broker_epoch, response, attempts, partitions))

        return done
