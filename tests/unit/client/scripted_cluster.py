"""A scripted cluster for client, producer and consumer tests.

Real `runtime.net.server.Server`s on a `MemoryNetwork` under a `ManualClock`, one per broker,
whose handlers are scripted here: Metadata answers from `ScriptedCluster.leaders`; Produce,
Fetch and ListOffsets run against a tiny in-memory log per partition (batches stored as sent,
with the base offset patched in, as a broker does); InitProducerId hands out producer ids and
bumps epochs as node/broker/producer_ids.py does; any API can be overridden or made to fail
with scripted error codes. There is no broker here, so this is the other side of the wire.

Producer sequences are not checked unless `check_sequences` is set; then each partition keeps,
per producer id, its epoch and last few batches and answers as a broker's producer state does
(a duplicate: NONE with the original base offset; an older epoch: INVALID_PRODUCER_EPOCH; a gap,
or a newer epoch not starting at 0: OUT_OF_ORDER_SEQUENCE_NUMBER; no state: accepted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from client.client import Client
from client.config import ClientConfig
from runtime.clock import NS_PER_MS, Clock, ManualClock
from runtime.net.dialect import (
    Handler,
    RequestContext,
)
from runtime.net.memory import MemoryNetwork
from runtime.net.server import Server
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from wire.messages.base import Response
from wire.record_reader import iter_records
from wire.records import BatchHeader, iter_batches, patch_batch
from wire.topic import TopicPartition

ScriptedHandler = Callable[[int, Any, RequestContext], Awaitable[Response]]

EARLIEST = -2
LATEST = -1
FIRST_PRODUCER_ID = 1000
RETAINED_BATCHES = 5  # per producer and partition, as Kafka's broker keeps


@dataclass
class ProducerEntry:
    """A producer's state in one partition: its epoch and last batches (first sequence, last
    sequence, base offset)."""

    epoch: int
    batches: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass
class PartitionLog:
    """The batches of one partition: (base offset, bytes with the base offset patched in)."""

    batches: list[tuple[int, bytes]] = field(default_factory=list)
    log_start_offset: int = 0
    end_offset: int = 0
    timestamps: list[tuple[int, int]] = field(default_factory=list)  # (offset, timestamp)

    def append(self, data: bytes) -> int:
        base = self.end_offset
        buf = bytearray(data)
        for pos, header in iter_batches(buf):
            offset = self.end_offset
            patch_batch(buf, pos, base_offset=offset, partition_leader_epoch=0)
            for record in iter_records(buf, pos):
                self.timestamps.append((record.offset, record.timestamp))
            self.end_offset = offset + header.last_offset_delta + 1
            size = header.batch_length + 12
            self.batches.append((offset, bytes(buf[pos : pos + size])))
        return base

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for base, data in self.batches:
            last = base + int.from_bytes(data[23:27], "big")
            if last < offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)


class ScriptedCluster:
    def __init__(self, clock: Clock, *, brokers: int = 2, seed: int = 1) -> None:
        self.clock = clock
        self.seed = seed
        self.network = MemoryNetwork(seed, clock)
        self.addresses = {i: Address(f"broker-{i}", 9092) for i in range(brokers)}
        # topic -> leader broker id per partition (-1: none); epochs per partition.
        self.leaders: dict[str, list[int]] = {}
        self.epochs: dict[TopicPartition, int] = {}
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.overrides: dict[int, ScriptedHandler] = {}
        # Error codes to answer, in order, before serving a partition normally.
        self.produce_errors: dict[TopicPartition, list[int]] = {}
        self.fetch_errors: dict[TopicPartition, list[int]] = {}
        self.requests: list[tuple[int, int]] = []  # (broker id, api key), in arrival order
        # Every produced batch as it arrived (also those answered with an error), in order.
        self.produced: list[tuple[TopicPartition, bytes]] = []
        self.init_producer_id_requests: list[InitProducerIdRequest] = []
        # Error codes to answer InitProducerId with, in order, before answering normally.
        self.init_producer_id_errors: list[int] = []
        self.next_producer_id = FIRST_PRODUCER_ID
        self.check_sequences = False
        self.producer_states: dict[tuple[TopicPartition, int], ProducerEntry] = {}
        self.servers: dict[int, Server] = {}
        self.secret: bytes | None = None
        self._appended = asyncio.Event()

    def create_topic(self, name: str, leaders: list[int]) -> None:
        self.leaders[name] = list(leaders)
        for partition in range(len(leaders)):
            tp = TopicPartition(name, partition)
            self.epochs[tp] = 0
            self.logs[tp] = PartitionLog()

    def notify_append(self) -> None:
        """Wake long-polling fetches, as a produce does (for appends made by a test)."""
        self._appended.set()

    def move_leader(self, tp: TopicPartition, broker: int) -> None:
        self.leaders[tp.topic][tp.partition] = broker
        self.epochs[tp] += 1

    def count(self, api_key: int, broker: int | None = None) -> int:
        return sum(1 for b, k in self.requests if k == api_key and broker in (None, b))

    async def start(self, *, secret: bytes | None = None) -> None:
        self.secret = secret
        for broker, address in self.addresses.items():
            await self.start_broker(broker, address)

    def handlers(self, broker: int) -> dict[int, Handler]:
        """The scripted handlers of `broker`, by API key, for a `Server`."""
        keys = (
            ApiKey.METADATA,
            ApiKey.PRODUCE,
            ApiKey.FETCH,
            ApiKey.LIST_OFFSETS,
            ApiKey.BROKER_HEARTBEAT,
            ApiKey.INIT_PRODUCER_ID,
        )
        return {key: self._dispatcher(broker, key) for key in keys}

    async def start_broker(self, broker: int, address: Address) -> None:
        server = Server(
            self.network.transport(address.host),
            address,
            self.handlers(broker),
            clock=self.clock,
            cluster_secret=self.secret,
        )
        await server.start()
        self.servers[broker] = server

    async def stop(self) -> None:
        for server in self.servers.values():
            await server.stop()

    def client(self, *, config: ClientConfig | None = None, **kwargs: Any) -> Client:
        return Client(
            [self.addresses[0]],
            transport=self.network.transport("client"),
            clock=self.clock,
            config=config,
            **kwargs,
        )

    # -- handlers --------------------------------------------------------------------------

    def _dispatcher(self, broker: int, api_key: int) -> Handler:
        async def handle(request: Any, ctx: RequestContext) -> Response:
            self.requests.append((broker, api_key))
            override = self.overrides.get(api_key)
            if override is not None:
                return await override(broker, request, ctx)
            defaults: dict[int, ScriptedHandler] = {
                ApiKey.METADATA: self.metadata,
                ApiKey.PRODUCE: self.produce,
                ApiKey.FETCH: self.fetch,
                ApiKey.LIST_OFFSETS: self.list_offsets,
                ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            }
            default = defaults.get(api_key)
            if default is None:
                raise NotImplementedError(f"no scripted handler for API {api_key}")
            return await default(broker, request, ctx)

        return handle

    async def metadata(
        self, broker: int, request: MetadataRequest, ctx: RequestContext
    ) -> MetadataResponse:
        names = list(self.leaders) if request.topics is None else [t.name for t in request.topics]
        topics = []
        for name in names:
            assert name is not None
            if name not in self.leaders:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                topics.append(MetadataResponseTopic(error_code=code, name=name))
                continue
            partitions = [
                MetadataResponsePartition(
                    partition_index=p,
                    leader_id=leader,
                    leader_epoch=self.epochs[TopicPartition(name, p)],
                    replica_nodes=sorted(self.addresses),
                    isr_nodes=sorted(self.addresses),
                )
                for p, leader in enumerate(self.leaders[name])
            ]
            topics.append(MetadataResponseTopic(name=name, partitions=partitions))
        brokers = [
            MetadataResponseBroker(node_id=b, host=a.host, port=a.port)
            for b, a in sorted(self.addresses.items())
        ]
        return MetadataResponse(brokers=brokers, controller_id=0, topics=topics)

    def _error_for(
        self, broker: int, tp: TopicPartition, scripted: dict[TopicPartition, list[int]]
    ) -> int:
        queue = scripted.get(tp)
        if queue:
            return queue.pop(0)
        if tp not in self.logs:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if self.leaders[tp.topic][tp.partition] != broker:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    async def produce(
        self, broker: int, request: ProduceRequest, ctx: RequestContext
    ) -> ProduceResponse:
        responses = []
        for topic in request.topic_data:
            parts = []
            for data in topic.partition_data:
                tp = TopicPartition(topic.name, data.index)
                records = bytes(data.records)
                self.produced.append((tp, records))
                code = self._error_for(broker, tp, self.produce_errors)
                if code != ErrorCode.NONE:
                    parts.append(PartitionProduceResponse(index=data.index, error_code=code))
                    continue
                code, duplicate_of = self._check_sequence(tp, records)
                if code != ErrorCode.NONE:
                    parts.append(PartitionProduceResponse(index=data.index, error_code=code))
                    continue
                if duplicate_of is not None:  # answered with the original batch's offset
                    answer = PartitionProduceResponse(index=data.index, base_offset=duplicate_of)
                    parts.append(answer)
                    continue
                base = self.logs[tp].append(records)
                self._record_sequence(tp, records, base)
                parts.append(PartitionProduceResponse(index=data.index, base_offset=base))
            responses.append(TopicProduceResponse(name=topic.name, partition_responses=parts))
        self._appended.set()
        return ProduceResponse(responses=responses)

    def _check_sequence(self, tp: TopicPartition, records: bytes) -> tuple[int, int | None]:
        """(error code, base offset of the batch this one duplicates) under `check_sequences`;
        the rules of a broker's producer state, for a request of one batch."""
        if not self.check_sequences:
            return ErrorCode.NONE, None
        header = _only_header(records)
        if header.producer_id < 0:
            return ErrorCode.NONE, None
        entry = self.producer_states.get((tp, header.producer_id))
        if entry is None:
            return ErrorCode.NONE, None
        first = header.base_sequence
        last = (first + header.last_offset_delta) % (1 << 31)
        if header.producer_epoch == entry.epoch:
            for batch_first, batch_last, base_offset in entry.batches:
                if (batch_first, batch_last) == (first, last):
                    return ErrorCode.NONE, base_offset
        if header.producer_epoch < entry.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        if header.producer_epoch > entry.epoch:
            expected = 0
        else:
            expected = (entry.batches[-1][1] + 1) % (1 << 31) if entry.batches else 0
        if first != expected:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ErrorCode.NONE, None

    def _record_sequence(self, tp: TopicPartition, records: bytes, base_offset: int) -> None:
        if not self.check_sequences:
            return
        header = _only_header(records)
        if header.producer_id < 0:
            return
        key = (tp, header.producer_id)
        entry = self.producer_states.get(key)
        if entry is None or entry.epoch != header.producer_epoch:
            entry = self.producer_states[key] = ProducerEntry(header.producer_epoch)
        last = (header.base_sequence + header.last_offset_delta) % (1 << 31)
        entry.batches.append((header.base_sequence, last, base_offset))
        del entry.batches[:-RETAINED_BATCHES]

    async def init_producer_id(
        self, broker: int, request: InitProducerIdRequest, ctx: RequestContext
    ) -> InitProducerIdResponse:
        self.init_producer_id_requests.append(request)
        if self.init_producer_id_errors:
            return InitProducerIdResponse(error_code=self.init_producer_id_errors.pop(0))
        if request.producer_id >= 0:  # KIP-360: the same id, the next epoch
            return InitProducerIdResponse(
                producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1
            )
        producer_id = self.next_producer_id
        self.next_producer_id += 1
        return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    async def fetch(self, broker: int, request: FetchRequest, ctx: RequestContext) -> FetchResponse:
        deadline_ns = self.clock.monotonic_ns() + request.max_wait_ms * NS_PER_MS
        while True:
            response, size = self._read(broker, request)
            errors = any(
                p.error_code != ErrorCode.NONE for t in response.responses for p in t.partitions
            )
            if errors or size >= request.min_bytes or self.clock.monotonic_ns() >= deadline_ns:
                return response
            # Long poll: wait for an append or the deadline, on the injected clock.
            self._appended.clear()
            alarm = self.clock.call_at_ns(deadline_ns, self._appended.set)
            try:
                await self._appended.wait()
            finally:
                alarm.cancel()

    def _read(self, broker: int, request: FetchRequest) -> tuple[FetchResponse, int]:
        topics = []
        total = 0
        for topic in request.topics:
            parts = []
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition)
                code = self._error_for(broker, tp, self.fetch_errors)
                if code == ErrorCode.NONE:
                    log = self.logs[tp]
                    if not log.log_start_offset <= part.fetch_offset <= log.end_offset:
                        code = ErrorCode.OFFSET_OUT_OF_RANGE
                if code != ErrorCode.NONE:
                    parts.append(
                        FetchResponsePartition(partition_index=part.partition, error_code=code)
                    )
                    continue
                records = log.read(part.fetch_offset, part.partition_max_bytes)
                total += len(records)
                parts.append(
                    FetchResponsePartition(
                        partition_index=part.partition,
                        high_watermark=log.end_offset,
                        last_stable_offset=log.end_offset,
                        log_start_offset=log.log_start_offset,
                        records=records,
                    )
                )
            topics.append(FetchableTopicResponse(topic=topic.topic, partitions=parts))
        return FetchResponse(responses=topics), total

    async def list_offsets(
        self, broker: int, request: ListOffsetsRequest, ctx: RequestContext
    ) -> ListOffsetsResponse:
        topics = []
        for topic in request.topics:
            parts = []
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                code = self._error_for(broker, tp, {})
                if code != ErrorCode.NONE:
                    parts.append(
                        ListOffsetsPartitionResponse(
                            partition_index=part.partition_index, error_code=code
                        )
                    )
                    continue
                log = self.logs[tp]
                offset, stamp = self._lookup(log, part.timestamp)
                parts.append(
                    ListOffsetsPartitionResponse(
                        partition_index=part.partition_index, offset=offset, timestamp=stamp
                    )
                )
            topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=parts))
        return ListOffsetsResponse(topics=topics)

    @staticmethod
    def _lookup(log: PartitionLog, timestamp: int) -> tuple[int, int]:
        if timestamp == EARLIEST:
            return log.log_start_offset, -1
        if timestamp == LATEST:
            return log.end_offset, -1
        for offset, stamp in log.timestamps:
            if stamp >= timestamp and offset >= log.log_start_offset:
                return offset, stamp
        return -1, -1


def _only_header(records: bytes) -> BatchHeader:
    headers = [header for _, header in iter_batches(records)]
    assert len(headers) == 1, f"{len(headers)} batches in one partition's produce data"
    return headers[0]


def batch_headers(cluster: ScriptedCluster, tp: TopicPartition) -> list[BatchHeader]:
    """The header of every batch produced to `tp`, in arrival order (also refused ones)."""
    return [_only_header(data) for p, data in cluster.produced if p == tp]


async def settle(rounds: int = 50) -> None:
    """Let ready tasks run (the in-memory network delivers through call_soon chains)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def advance_until(
    clock: ManualClock, done: Callable[[], bool], *, step_ms: float, max_steps: int
) -> None:
    """Advance the manual clock in steps until `done()`; fails after `max_steps` steps."""
    for _ in range(max_steps):
        await settle()
        if done():
            return
        clock.advance(step_ms)
    await settle()
    assert done(), f"condition not reached within {max_steps} steps of {step_ms} ms"
