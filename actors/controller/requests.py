"""What the controller tells brokers, built from its model: LeaderAndIsr and UpdateMetadata
partition states, the live-broker list, live leaders and topic configs.

Pure functions of the model (and of the controller's liveness sets), so the actor only decides
*which* partitions and brokers a request is for. A topic queued for deletion is announced with
leader -2 (Kafka's LeaderDuringDelete): brokers stop serving it before its replicas are deleted.
A live broker in controlled shutdown is listed with `in_controlled_shutdown` (KIP-841, KRaft's
BrokerRegistration.inControlledShutdown), in every UpdateMetadata.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from actors.controller.model import ControllerModel
from actors.metadata_cache import LEADER_DURING_DELETE
from wire.messages import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    TopicConfigEntry,
    TopicConfigs,
    UpdateMetadataAcl,
    UpdateMetadataBroker,
    UpdateMetadataClientQuota,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataScramCredential,
)
from wire.messages.quotas import EntityData, ValueData
from wire.metadata_records import PartitionRecord

NATIVE_LISTENER = "native"


def leader_and_isr_state(
    model: ControllerModel, partition: PartitionRecord, *, is_new: bool = False
) -> LeaderAndIsrPartitionState:
    topic = model.topic_by_id(partition.topic_id)
    assert topic is not None, partition
    return LeaderAndIsrPartitionState(
        topic_name=topic.name,
        topic_id=partition.topic_id,
        partition_index=partition.partition,
        controller_epoch=model.controller_epoch,
        leader=partition.leader,
        leader_epoch=partition.leader_epoch,
        isr=list(partition.isr),
        partition_epoch=partition.partition_epoch,
        replicas=list(partition.replicas),
        is_new=is_new,
    )


def update_metadata_state(
    model: ControllerModel,
    partition: PartitionRecord,
    live: Collection[int],
    offline: Collection[int] = (),
) -> UpdateMetadataPartitionState:
    """`offline`: replicas on live brokers whose log dir failed (they count as offline too)."""
    topic = model.topic_by_id(partition.topic_id)
    assert topic is not None, partition
    deleting = model.is_queued_for_deletion(partition.topic_id)
    return UpdateMetadataPartitionState(
        topic_name=topic.name,
        topic_id=partition.topic_id,
        partition_index=partition.partition,
        controller_epoch=model.controller_epoch,
        leader=LEADER_DURING_DELETE if deleting else partition.leader,
        leader_epoch=partition.leader_epoch,
        isr=list(partition.isr),
        partition_epoch=partition.partition_epoch,
        replicas=list(partition.replicas),
        offline_replicas=[r for r in partition.replicas if r not in live or r in offline],
    )


def live_broker_entries(
    model: ControllerModel, live: Iterable[int], shutting_down: Collection[int]
) -> list[UpdateMetadataBroker]:
    """The live brokers, each flagged when it is in controlled shutdown: a leader reading the flag
    stops proposing that broker for its ISR at once (KIP-841), rather than proposing it on every
    fetch for the controller to refuse."""
    entries = []
    for broker_id in sorted(live):
        broker = model.broker(broker_id)
        assert broker is not None, broker_id
        entries.append(
            UpdateMetadataBroker(
                id=broker_id,
                endpoints=[
                    UpdateMetadataEndpoint(host=e.host, port=e.port, listener=e.listener)
                    for e in broker.endpoints
                ],
                rack=broker.rack,
                in_controlled_shutdown=broker_id in shutting_down,
            )
        )
    return entries


def live_leaders(
    model: ControllerModel, partitions: Iterable[PartitionRecord], live: Collection[int]
) -> list[LeaderAndIsrLiveLeader]:
    leaders = []
    for broker_id in sorted({p.leader for p in partitions if p.leader in live}):
        address = native_address(model, broker_id)
        if address is not None:
            host, port = address
            leaders.append(LeaderAndIsrLiveLeader(broker_id=broker_id, host_name=host, port=port))
    return leaders


def topic_configs(model: ControllerModel, topic_names: Iterable[str]) -> list[TopicConfigs]:
    entries = []
    for name in sorted(set(topic_names)):
        topic = model.topic_by_name(name)
        if topic is not None:
            entries.append(
                TopicConfigs(
                    topic_name=name,
                    configs=[
                        TopicConfigEntry(name=key, value=value)
                        for key, value in sorted(topic.configs.items())
                    ],
                )
            )
    return entries


def client_quota_entries(model: ControllerModel) -> list[UpdateMetadataClientQuota]:
    """Every client quota, for an UpdateMetadata (brokers replace their whole set with it)."""
    return [
        UpdateMetadataClientQuota(
            entity=[EntityData(entity_type=kind, entity_name=name) for kind, name in entity],
            values=[ValueData(key=key, value=value) for key, value in sorted(values.items())],
        )
        for entity, values in sorted(model.client_quotas().items(), key=lambda item: repr(item))
    ]


def acl_entries(model: ControllerModel) -> list[UpdateMetadataAcl]:
    """Every ACL, for an UpdateMetadata (brokers replace their whole set with it)."""
    return [
        UpdateMetadataAcl(
            resource_type=acl.resource_type,
            resource_name=acl.resource_name,
            pattern_type=acl.pattern_type,
            principal=acl.principal,
            host=acl.host,
            operation=acl.operation,
            permission_type=acl.permission_type,
        )
        for acl in model.acls()
    ]


def scram_credential_entries(model: ControllerModel) -> list[UpdateMetadataScramCredential]:
    """Every SCRAM credential, for an UpdateMetadata (brokers replace their whole set with it)."""
    return [
        UpdateMetadataScramCredential(
            name=c.name,
            mechanism=c.mechanism,
            salt=c.salt,
            stored_key=c.stored_key,
            server_key=c.server_key,
            iterations=c.iterations,
        )
        for c in model.scram_credentials()
    ]


def native_address(model: ControllerModel, broker_id: int) -> tuple[str, int] | None:
    """Where the controller reaches the broker: its native listener."""
    broker = model.broker(broker_id)
    if broker is None:
        return None
    for endpoint in broker.endpoints:
        if endpoint.listener == NATIVE_LISTENER:
            return endpoint.host, endpoint.port
    return None
