"""The consumer: manually assigned partitions, long-poll fetches, positions, seeks, offset lookups.

    consumer = Consumer(client, config=ConsumerConfig(auto_offset_reset="earliest"))
    consumer.assign([("events", 0), ("events", 1)])
    records = await consumer.poll(timeout_ms=1000)      # [] when nothing arrived in time
    consumer.seek(TopicPartition("events", 0), 42)
    await consumer.close()

Positions. Each assigned partition has a position: the offset of the next record `poll()`
returns. A partition without one (just assigned, or after `seek_to_beginning/end` or an
OFFSET_OUT_OF_RANGE) is *reset* before fetching, by a ListOffsets request to its leader for the
earliest (-2) or latest (-1) offset, per auto.offset.reset ("none": `poll()` raises
`NoOffsetForPartitionError` / `OffsetOutOfRangeError` instead).

Fetching. `poll()` keeps at most one Fetch in flight per leader, carrying every assigned
partition that leader leads, at its position with the partition's known leader epoch (KIP-320),
and with fetch.max.wait.ms / fetch.min.bytes so the broker holds the request until data arrives
(long poll) — a poll returns as soon as any fetch brings records. A fetch still in flight when
`poll()` times out stays in flight, and its answer serves the next `poll()`. An answer for a
partition whose position changed meanwhile (seek, reassignment) is dropped.

Records. A partition's fetched bytes are decoded by `client.fetched_records.decode_fetched`:
records below the position are skipped, control batches too, and the position moves past every
complete batch (its docstring says how a batch cut short is handled). Offset lookups and resets
are ListOffsets requests (`client.list_offsets`).

Isolation (isolation.level). read_uncommitted fetches up to the high watermark and returns every
record. read_committed fetches with isolation level 1, so the broker stops at the last stable
offset (the first offset of the oldest open transaction), and drops the records of aborted
transactions the answer names (`decode_fetched`'s docstring has the rule); control batches are
never returned. Offset lookups and resets ask with the same isolation level, so "latest" and
`end_offsets` are the last stable offset for a read_committed consumer, as in Kafka: it never
starts inside an open transaction.

Errors per partition: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH
and the like refresh metadata and try again at the next leader; OFFSET_OUT_OF_RANGE resets the
position; any other retriable error is retried after retry.backoff.ms; a non-retriable one is
raised by `poll()`. A failed request to a broker (connection lost, timeout) backs that broker off
for retry.backoff.ms and refreshes metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from client.client import Client
from client.config import ConsumerConfig
from client.errors import ClientClosedError, ClientError, invalidates_metadata
from client.fetched_records import ConsumerRecord, decode_fetched
from client.list_offsets import (
    OffsetAndTimestamp,
    list_offsets,
)
from runtime.clock import NS_PER_MS
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
)
from wire.messages.data import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
)
from wire.topic import TopicPartition

_log = logging.getLogger(__name__)

FETCH_READ_COMMITTED = 1  # Fetch's isolation_level: up to the last stable offset


class NoOffsetForPartitionError(ClientError):
    """A partition has no position and auto.offset.reset is "none"."""


class OffsetOutOfRangeError(KafkaError):
    """The position is outside the partition's log and auto.offset.reset is "none"."""

    def __init__(self, tp: TopicPartition, position: int) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, f"{tp} at offset {position}")
        self.tp = tp
        self.position = position


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None
    reset_to: int | None = None  # EARLIEST_TIMESTAMP / LATEST_TIMESTAMP while a reset is due
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class _FetchResult:
    node_id: int
    positions: Mapping[TopicPartition, int]  # what the request asked for
    response: FetchResponse | None
    error: Exception | None


def _as_tp(item: TopicPartition | tuple[str, int]) -> TopicPartition:
    return item if isinstance(item, TopicPartition) else TopicPartition(item[0], item[1])


class Consumer:
    def __init__(
        self,
        client: Client,
        *,
        config: ConsumerConfig | None = None,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._clock = client.clock
        self.config = config or ConsumerConfig()
        self._owns_client = owns_client
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._fetches: dict[int, asyncio.Task[_FetchResult]] = {}
        self._results: list[_FetchResult] = []
        self._node_backoff_until_ms: dict[int, int] = {}
        self._wakeup = asyncio.Event()
        self._pending_error: Exception | None = None
        self._closed = False

    # ---------------------------------------------------------------------------------------
    # Assignment and positions

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Replace the assignment. Partitions kept keep their positions."""
        self._check_open()
        wanted = [_as_tp(p) for p in partitions]
        self._states = {tp: self._states.get(tp) or self._new_state() for tp in wanted}
        self._client.metadata.add_topics(tp.topic for tp in wanted)

    def _new_state(self) -> _PartitionState:
        state = _PartitionState()
        if self.config.auto_offset_reset != "none":
            state.reset_to = self._reset_timestamp()
        return state

    def _reset_timestamp(self) -> int:
        return (
            EARLIEST_TIMESTAMP if self.config.auto_offset_reset == "earliest" else LATEST_TIMESTAMP
        )

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(tp)
        if state is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return state

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        if offset < 0:
            raise ValueError(f"cannot seek to negative offset {offset}")
        state = self._state(_as_tp(tp))
        state.position = offset
        state.reset_to = None

    def seek_to_beginning(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Move to the earliest offset (resolved at the next `poll()` or `position()`)."""
        self._seek_reset(partitions, EARLIEST_TIMESTAMP)

    def seek_to_end(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Move to the log end offset (resolved at the next `poll()` or `position()`)."""
        self._seek_reset(partitions, LATEST_TIMESTAMP)

    def _seek_reset(self, partitions: Sequence[TopicPartition | tuple[str, int]], to: int) -> None:
        targets = [_as_tp(p) for p in partitions] or list(self._states)
        for tp in targets:
            state = self._state(tp)
            state.position = None
            state.reset_to = to

    async def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record to return, resolving a pending reset first."""
        tp = _as_tp(tp)
        state = self._state(tp)
        if state.position is None:
            await self._reset_positions([tp])
        assert state.position is not None
        return state.position

    def high_watermark(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The high watermark of the last fetch answer for `tp` (-1 before any)."""
        return self._state(_as_tp(tp)).high_watermark

    def last_stable_offset(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The last stable offset of the last fetch answer for `tp` (-1 before any)."""
        return self._state(_as_tp(tp)).last_stable_offset

    # ---------------------------------------------------------------------------------------
    # Offset lookups

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the earliest offset whose timestamp is >= the given one (None if
        no such record exists)."""
        found = await self._list_offsets(dict(timestamps))
        return {tp: (None if o.offset < 0 else o) for tp, o in found.items()}

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        found = await self._list_offsets(dict.fromkeys(partitions, EARLIEST_TIMESTAMP))
        return {tp: o.offset for tp, o in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = await self._list_offsets(dict.fromkeys(partitions, LATEST_TIMESTAMP))
        return {tp: o.offset for tp, o in found.items()}

    async def _list_offsets(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        self._check_open()
        return await list_offsets(
            self._client,
            timestamps,
            replica_id=self.config.replica_id,
            timeout_ms=self.config.request_timeout_ms,
            isolation_level=FETCH_READ_COMMITTED if self.config.read_committed else 0,
        )

    async def _reset_positions(self, partitions: Iterable[TopicPartition]) -> None:
        due: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self._states.get(tp)
            if state is None or state.position is not None:
                continue
            if state.reset_to is None:
                raise NoOffsetForPartitionError(f"{tp} has no position and auto.offset.reset=none")
            due[tp] = state.reset_to
        if not due:
            return
        found = await self._list_offsets(due)
        for tp, to in due.items():
            state = self._states.get(tp)
            # Skip partitions unassigned or sought elsewhere while the lookup was running.
            if state is not None and state.position is None and state.reset_to == to:
                state.position = found[tp].offset
                state.reset_to = None

    # ---------------------------------------------------------------------------------------
    # Polling

    async def poll(self, timeout_ms: float = 0) -> list[ConsumerRecord]:
        """Records from the assigned partitions, in offset order per partition.

        Returns as soon as any fetch brings records, or `[]` after `timeout_ms` (measured on
        the injected clock) with nothing new.
        """
        self._check_open()
        deadline_ns = self._clock.monotonic_ns() + round(timeout_ms * NS_PER_MS)
        await self._reset_positions(list(self._states))
        while True:
            records = self._take_results()
            if records:
                return records
            error, self._pending_error = self._pending_error, None
            if error is not None:
                raise error
            await self._reset_positions(list(self._states))  # after OFFSET_OUT_OF_RANGE
            await self._send_fetches()
            now_ns = self._clock.monotonic_ns()
            if now_ns >= deadline_ns:
                return []
            if not self._fetches:
                # Nothing in flight (leaders unknown or brokers backing off): look again after
                # retry.backoff.ms instead of sleeping through the whole poll.
                retry_ns = now_ns + self.config.retry_backoff_ms * NS_PER_MS
                await self._wait(min(deadline_ns, retry_ns))
            else:
                await self._wait(deadline_ns)

    async def _wait(self, deadline_ns: int) -> None:
        if self._results:
            return
        alarm = self._clock.call_at_ns(deadline_ns, self._wakeup.set)
        try:
            await self._wakeup.wait()
        finally:
            self._wakeup.clear()
            alarm.cancel()

    def _fetchable(self) -> dict[int, dict[TopicPartition, int]]:
        """Per leader node, the partitions to fetch and their positions."""
        view = self._client.metadata.view
        now_ms = self._clock.monotonic_ms()
        plan: dict[int, dict[TopicPartition, int]] = {}
        for tp, state in self._states.items():
            if state.position is None:
                continue
            leader = view.leader(tp)
            if leader is None:
                self._client.metadata.request_update()
                continue
            node = leader.node_id
            if node in self._fetches or self._node_backoff_until_ms.get(node, 0) > now_ms:
                continue
            plan.setdefault(node, {})[tp] = state.position
        return plan

    async def _send_fetches(self) -> None:
        if self._client.metadata.update_requested() or any(
            self._client.metadata.view.leader(tp) is None for tp in self._states
        ):
            try:
                await self._client.cluster()
            except (ClientError, KafkaError) as exc:
                # Fetching goes on with the partitions whose leaders are known.
                _log.debug("metadata refresh before fetch failed: %s", exc)
        for node, positions in self._fetchable().items():
            task = asyncio.create_task(self._fetch(node, positions), name=f"fetch from {node}")
            self._fetches[node] = task
            task.add_done_callback(self._fetch_done)

    def _fetch_done(self, task: asyncio.Task[_FetchResult]) -> None:
        if task.cancelled():
            return
        result = task.result()
        if self._fetches.get(result.node_id) is task:
            del self._fetches[result.node_id]
        self._results.append(result)
        self._wakeup.set()

    async def _fetch(self, node_id: int, positions: dict[TopicPartition, int]) -> _FetchResult:
        view = self._client.metadata.view
        topics: dict[str, list[FetchPartition]] = {}
        for tp, offset in positions.items():
            info = view.partition(tp)
            topics.setdefault(tp.topic, []).append(
                FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=-1 if info is None else info.leader_epoch,
                    fetch_offset=offset,
                    partition_max_bytes=self.config.max_partition_fetch_bytes,
                )
            )
        request = FetchRequest(
            replica_id=self.config.replica_id,
            max_wait_ms=self.config.fetch_max_wait_ms,
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_max_bytes,
            isolation_level=FETCH_READ_COMMITTED if self.config.read_committed else 0,
            topics=[FetchTopic(topic=t, partitions=p) for t, p in topics.items()],
        )
        timeout_ms = self.config.request_timeout_ms + self.config.fetch_max_wait_ms
        try:
            response = await self._client.send_expect(
                node_id, request, FetchResponse, timeout_ms=timeout_ms
            )
        except (ClientError, KafkaError) as exc:
            return _FetchResult(node_id, positions, None, exc)
        return _FetchResult(node_id, positions, response, None)

    def _take_results(self) -> list[ConsumerRecord]:
        """Records from the completed fetches; the first error is kept for `poll()` to raise.

        Every partition is processed even after an error, so records already decoded (and
        positions already advanced) are never lost; the error surfaces once they are returned.
        """
        results, self._results = self._results, []
        records: list[ConsumerRecord] = []
        for result in results:
            try:
                if result.error is not None:
                    self._fetch_failed(result.node_id, result.error)
                    continue
                assert result.response is not None
                records += self._result_records(result, result.response)
            except Exception as exc:
                if self._pending_error is None:
                    self._pending_error = exc
        return records

    def _result_records(
        self, result: _FetchResult, response: FetchResponse
    ) -> list[ConsumerRecord]:
        records: list[ConsumerRecord] = []
        error: Exception | None = None
        for topic in response.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, part.partition_index)
                asked = result.positions.get(tp)
                state = self._states.get(tp)
                if asked is None or state is None or state.position != asked:
                    continue  # unassigned or sought since the fetch was sent
                try:
                    records += self._partition_records(result.node_id, tp, state, part)
                except Exception as exc:
                    error = error or exc
        if error is not None and self._pending_error is None:
            self._pending_error = error
        return records

    def _fetch_failed(self, node_id: int, error: Exception) -> None:
        if isinstance(error, KafkaError) and not error.retriable:
            raise error
        if isinstance(error, ClientClosedError):
            raise error
        _log.debug("fetch from %d failed: %s", node_id, error)
        self._client.metadata.request_update()
        now_ms = self._clock.monotonic_ms()
        self._node_backoff_until_ms[node_id] = now_ms + self.config.retry_backoff_ms

    def _partition_records(
        self, node_id: int, tp: TopicPartition, state: _PartitionState, part: FetchResponsePartition
    ) -> list[ConsumerRecord]:
        code = ErrorCode.from_code(part.error_code)
        if code is ErrorCode.NONE:
            state.high_watermark = part.high_watermark
            state.last_stable_offset = part.last_stable_offset
            state.log_start_offset = part.log_start_offset
            assert state.position is not None
            aborted = None
            if self.config.read_committed:
                # A read_committed answer names its aborted transactions (none: an empty list).
                aborted = part.aborted_transactions or []
            records, state.position = decode_fetched(
                tp,
                state.position,
                part.records,
                limit=self.config.max_partition_fetch_bytes,
                aborted_transactions=aborted,
            )
            return records
        if code is ErrorCode.OFFSET_OUT_OF_RANGE:
            position = state.position
            assert position is not None
            if self.config.auto_offset_reset == "none":
                raise OffsetOutOfRangeError(tp, position)
            _log.info("%s: offset %d out of range, resetting", tp, position)
            state.position = None
            state.reset_to = self._reset_timestamp()
            return []
        if not code.retriable:
            raise KafkaError(code, str(tp))
        if invalidates_metadata(KafkaError(code)):
            self._client.metadata.request_update()
        else:
            now_ms = self._clock.monotonic_ms()
            self._node_backoff_until_ms[node_id] = now_ms + self.config.retry_backoff_ms
        return []

    # ---------------------------------------------------------------------------------------
    # Shutdown

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")

    async def close(self) -> None:
        """Cancel in-flight fetches (and close the client if the consumer owns it)."""
        if self._closed:
            return
        self._closed = True
        fetches = list(self._fetches.values())
        self._fetches.clear()
        for task in fetches:
            task.cancel()
        for task in fetches:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._results.clear()
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
