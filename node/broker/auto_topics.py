"""Topics created when a client first asks for them (Kafka's auto.create.topics.enable and its
AutoTopicCreationManager).

A producer of most Kafka clients asks Metadata for its topic with allow_auto_topic_creation set
(Metadata v0-3 always mean it) and expects the broker to create a topic that does not exist. A
Metadata answer goes through `AutoTopicCreationManager.answer`, which decides for each topic
asked for by name that the broker's metadata does not know, in Kafka's order:

- a name that is not a legal topic name: INVALID_TOPIC_EXCEPTION (whether or not creation is
  on, as Kafka answers);
- creation off (auto.create.topics.enable=false, or the request does not allow it), or an
  internal topic (`__consumer_offsets`, `__transaction_state`: their coordinators create them,
  with their own partition counts): UNKNOWN_TOPIC_OR_PARTITION, as before;
- a creation of that topic already under way from this broker: UNKNOWN_TOPIC_OR_PARTITION, as
  Kafka answers a topic in its in-flight set (more than `MAX_IN_FLIGHT` under way: the same, so
  a client asking for many names cannot queue an unbounded number of creations);
- otherwise: LEADER_NOT_AVAILABLE, and a CreateTopics with num.partitions partitions and
  default.replication.factor replicas goes to the controller (through the forwarder, KIP-590)
  without holding the answer. The topic appears in the broker's metadata with the controller's
  next UpdateMetadata, and the client's retried Metadata finds it.

A creation the controller refuses (INVALID_REPLICATION_FACTOR with fewer live brokers than
default.replication.factor, as Kafka's auto-creation fails) is logged; the topic stays unknown,
each Metadata the client retries starts another creation that fails the same way, and the client
gives up at its own timeout, as against Kafka. TOPIC_ALREADY_EXISTS (another broker or an admin
got there first) is success.

Ownership: the manager runs on the broker's event loop; `answer` is synchronous and the creation
tasks only discard their own names from the in-flight set when they end, so no lock is needed.
`stop()` cancels the tasks still running; none outlives it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from runtime.properties import config_from_properties
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseTopic,
)
from wire.topic import INTERNAL_TOPICS, validate_topic_name

log = logging.getLogger(__name__)

# The most topics whose creation may be under way at once from one broker.
MAX_IN_FLIGHT: Final = 1_000
# CreatableTopic.replication_factor is a Kafka int16.
_MAX_REPLICATION_FACTOR: Final = 2**15 - 1

CreateTopics = Callable[[CreateTopicsRequest], Awaitable[CreateTopicsResponse]]


@dataclass(frozen=True, slots=True)
class AutoTopicCreationConfig:
    """The settings under Kafka's property names and defaults."""

    # auto.create.topics.enable
    auto_create_topics_enable: bool = True
    # num.partitions: the partitions of an auto-created topic.
    num_partitions: int = 1
    # default.replication.factor: its replicas; more than the live brokers and the controller
    # refuses the creation (INVALID_REPLICATION_FACTOR), as Kafka's does.
    default_replication_factor: int = 1

    def __post_init__(self) -> None:
        if self.num_partitions < 1:
            raise ValueError(f"num.partitions must be >= 1: {self.num_partitions}")
        if not 1 <= self.default_replication_factor <= _MAX_REPLICATION_FACTOR:
            raise ValueError(
                f"default.replication.factor must be 1..{_MAX_REPLICATION_FACTOR}: "
                f"{self.default_replication_factor}"
            )

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> AutoTopicCreationConfig:
        return config_from_properties(cls, properties)


def is_legal_topic_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except ValueError:
        return False
    return True


class AutoTopicCreationManager:
    def __init__(self, config: AutoTopicCreationConfig, create_topics: CreateTopics) -> None:
        self.config = config
        self._create_topics = create_topics
        self._in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False

    @property
    def in_flight(self) -> frozenset[str]:
        """The topics whose creation this broker has asked for and not yet heard back about."""
        return frozenset(self._in_flight)

    def answer(self, request: MetadataRequest, response: MetadataResponse) -> MetadataResponse:
        """`response` (the broker's metadata answer to `request`) with each unknown topic asked
        for by name answered as the module docstring says; creations start here."""
        if request.topics is None:
            return response  # every topic the broker knows: none of them is unknown
        allowed = (
            request.allow_auto_topic_creation
            and self.config.auto_create_topics_enable
            and not self._stopped
        )
        topics: list[MetadataResponseTopic] = []
        creating: list[str] = []
        for topic in response.topics:
            # Asked by id (no name), or known: the answer stands.
            if topic.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or not topic.name:
                topics.append(topic)
                continue
            error = self._unknown_topic(topic.name, allowed)
            if error is ErrorCode.LEADER_NOT_AVAILABLE:
                creating.append(topic.name)
            topics.append(replace(topic, error_code=error))
        if creating:
            self._start_creation(creating)
        return replace(response, topics=topics)

    def _unknown_topic(self, name: str, allowed: bool) -> ErrorCode:
        if not is_legal_topic_name(name):
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if not allowed or name in INTERNAL_TOPICS:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if name in self._in_flight or len(self._in_flight) >= MAX_IN_FLIGHT:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        self._in_flight.add(name)
        return ErrorCode.LEADER_NOT_AVAILABLE

    def _start_creation(self, names: list[str]) -> None:
        request = CreateTopicsRequest(
            topics=[
                CreatableTopic(
                    name=name,
                    num_partitions=self.config.num_partitions,
                    replication_factor=self.config.default_replication_factor,
                )
                for name in names
            ]
        )
        task = asyncio.get_running_loop().create_task(
            self._create(request), name=f"auto-create {','.join(names)}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create(self, request: CreateTopicsRequest) -> None:
        names = [t.name for t in request.topics]
        try:
            response = await self._create_topics(request)
            for result in response.topics:
                if result.error_code == ErrorCode.NONE:
                    log.info("auto-created topic %s", result.name)
                if result.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    continue
                error = ErrorCode.from_code(result.error_code)
                log.warning(
                    "auto-creation of topic %s failed: %s%s",
                    result.name,
                    error.name,
                    f" ({result.error_message})" if result.error_message else "",
                )
        except Exception:
            # A bug (the forwarder answers every failure as a response): logged, and the next
            # Metadata request tries again.
            log.exception("auto-creation of %s failed", names)
        finally:
            self._in_flight.difference_update(names)

    async def stop(self) -> None:
        """Start no more creations and cancel those under way. Idempotent."""
        self._stopped = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
