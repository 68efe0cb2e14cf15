"""What a replica fetcher sends its leader, and how it reads the answers: OffsetForLeaderEpoch
(before truncating), Fetch, and ListOffsets (after OFFSET_OUT_OF_RANGE), each built from fetch
states (actors/replication/fetch_state.py), and each answer taken apart per partition.

Every request names this broker as replica_id and, per partition, the leader epoch of the
leadership being followed (current_leader_epoch, KIP-320), so that a leader in another epoch
fences it instead of answering. A Fetch lists what its fetch session (KIP-227) says to list.
Partitions are grouped by topic in the order they come.

Pure functions over values: no owner, no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from actors.replication.config import ReplicaFetcherConfig
from actors.replication.fetch_session_handler import FetchRequestData
from actors.replication.fetch_state import PartitionFetchState
from wire.messages import (
    EpochEndOffset,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
    ForgottenTopic,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from wire.topic import TopicPartition


def _by_topic(tps: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
    grouped: dict[str, list[TopicPartition]] = {}
    for tp in tps:
        grouped.setdefault(tp.topic, []).append(tp)
    return grouped


def offset_for_leader_epoch_request(
    replica_id: int, asked: Mapping[TopicPartition, tuple[int, int]]
) -> OffsetForLeaderEpochRequest:
    """`asked`: per partition, (the leader epoch followed, the follower's latest epoch)."""
    return OffsetForLeaderEpochRequest(
        replica_id=replica_id,
        topics=[
            OffsetForLeaderTopic(
                topic=topic,
                partitions=[
                    OffsetForLeaderPartition(
                        partition=tp.partition,
                        current_leader_epoch=asked[tp][0],
                        leader_epoch=asked[tp][1],
                    )
                    for tp in tps
                ],
            )
            for topic, tps in _by_topic(asked).items()
        ],
    )


def epoch_answers(
    response: OffsetForLeaderEpochResponse,
) -> Iterator[tuple[TopicPartition, EpochEndOffset]]:
    for topic_result in response.topics:
        for result in topic_result.partitions:
            yield TopicPartition(topic_result.topic, result.partition), result


def fetch_partitions(
    config: ReplicaFetcherConfig,
    partitions: Mapping[TopicPartition, PartitionFetchState],
    log_start_offset: Callable[[TopicPartition], int],
) -> dict[TopicPartition, FetchPartition]:
    """What to ask of each partition: from its fetch offset, in its leader epoch, with the
    follower's own log start offset (-1 when it has no replica)."""
    return {
        tp: FetchPartition(
            partition=tp.partition,
            current_leader_epoch=state.leader_epoch,
            fetch_offset=state.fetch_offset,
            log_start_offset=log_start_offset(tp),
            partition_max_bytes=config.replica_fetch_max_bytes,
        )
        for tp, state in partitions.items()
    }


def fetch_request(
    replica_id: int, config: ReplicaFetcherConfig, data: FetchRequestData
) -> FetchRequest:
    """One Fetch of a round (actors/replication/fetch_session_handler.py built `data`): the
    partitions it lists and forgets, under its session id and epoch."""
    return FetchRequest(
        replica_id=replica_id,
        max_wait_ms=config.replica_fetch_wait_max_ms,
        min_bytes=config.replica_fetch_min_bytes,
        max_bytes=config.replica_fetch_response_max_bytes,
        session_id=data.session_id,
        session_epoch=data.session_epoch,
        topics=[
            FetchTopic(topic=topic, partitions=[data.to_send[tp] for tp in tps])
            for topic, tps in _by_topic(data.to_send).items()
        ],
        forgotten_topics_data=[
            ForgottenTopic(topic=topic, partitions=[tp.partition for tp in tps])
            for topic, tps in _by_topic(data.forgotten).items()
        ],
    )


def fetched_partitions(
    response: FetchResponse,
) -> Iterator[tuple[TopicPartition, FetchResponsePartition]]:
    for topic_response in response.responses:
        for data in topic_response.partitions:
            yield TopicPartition(topic_response.topic, data.partition_index), data


def list_offsets_request(
    replica_id: int, tp: TopicPartition, leader_epoch: int, timestamp: int
) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=replica_id,
        topics=[
            ListOffsetsTopic(
                name=tp.topic,
                partitions=[
                    ListOffsetsPartition(
                        partition_index=tp.partition,
                        current_leader_epoch=leader_epoch,
                        timestamp=timestamp,
                    )
                ],
            )
        ],
    )


def listed_partition(
    response: ListOffsetsResponse, tp: TopicPartition
) -> ListOffsetsPartitionResponse | None:
    """The answer for `tp`, or None if the leader left it out."""
    for topic in response.topics:
        for partition in topic.partitions:
            if (topic.name, partition.partition_index) == (tp.topic, tp.partition):
                return partition
    return None
