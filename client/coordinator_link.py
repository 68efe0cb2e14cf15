"""A group member's link to its group coordinator: finding it, asking it, and what its answers
mean for the member (client/group_member.py owns the member; this module the way to the broker
that coordinates the group).

Finding. FindCoordinator (key type group) at any reachable broker, one lookup at a time however
many callers wait for it (the member's own calls and its heartbeat task). The coordinator found
is kept until NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, or a refused, lost or timed-out
connection to it says it moved; the next request looks it up again.

Answers (`check_code`). NONE passes; what another attempt may cure raises `GroupRetry`:
`rejoin` for REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID and
FENCED_INSTANCE_ID (the member must join again; `drop` says which of its ids the coordinator no
longer knows), otherwise a retriable code (the coordinator moved, is loading, timed out). Any
other code is a `KafkaError` no retry cures (INVALID_SESSION_TIMEOUT,
INCONSISTENT_GROUP_PROTOCOL, GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, ...).

`retrying()` repeats an attempt after retry.backoff.ms, doubling up to retry.backoff.max.ms
with seeded jitter, within a time budget on the client's clock.

Owned by one member on one event loop (no locks): the lookup task is the only task it starts.
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from client.client import Client
from client.connection import consume_outcome
from client.errors import ClientClosedError, ClientError, DeliveryTimeoutError
from client.transactions import CoordinatorNode, find_coordinator
from runtime.clock import NS_PER_MS
from runtime.net.backoff import ExponentialBackoff
from wire.errors import ErrorCode, KafkaError
from wire.messages import Request, Response
from wire.messages.groups import COORDINATOR_GROUP

_R = TypeVar("_R", bound=Response)
_T = TypeVar("_T")

_COORDINATOR_GONE: Final = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
)
# What a lost coordinator looks like from the client side (closing the client is not one).
_TRANSPORT_ERRORS: Final = (ClientError, TimeoutError)


class Drop(enum.Enum):
    """What a rejoin answer says the coordinator no longer knows of the member."""

    NOTHING = "nothing"  # REBALANCE_IN_PROGRESS: the generation goes on until the join
    GENERATION = "generation"  # ILLEGAL_GENERATION
    MEMBER = "member"  # UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID: the id and the generation


_REJOIN: Final[dict[ErrorCode, Drop]] = {
    ErrorCode.REBALANCE_IN_PROGRESS: Drop.NOTHING,
    ErrorCode.ILLEGAL_GENERATION: Drop.GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID: Drop.MEMBER,
    ErrorCode.FENCED_INSTANCE_ID: Drop.MEMBER,
}


class GroupRetry(Exception):
    """An attempt failed in a way another may cure; with `rejoin` only after joining again."""

    def __init__(
        self, cause: BaseException, *, rejoin: bool = False, drop: Drop = Drop.NOTHING
    ) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause
        self.rejoin = rejoin
        self.drop = drop


def check_code(code: ErrorCode, what: str) -> None:
    """Nothing for NONE, `GroupRetry` for what another attempt may cure, else `KafkaError`."""
    if code is ErrorCode.NONE:
        return
    error = KafkaError(code, what)
    drop = _REJOIN.get(code)
    if drop is not None:
        raise GroupRetry(error, rejoin=True, drop=drop)
    if code.retriable:
        raise GroupRetry(error)
    raise error


class CoordinatorLink:
    def __init__(
        self,
        client: Client,
        group_id: str,
        *,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        seed: int = 0,
    ) -> None:
        self._client = client
        self._clock = client.clock
        self.group_id = group_id
        self._request_timeout_ms = request_timeout_ms
        self._backoff = ExponentialBackoff(initial_ms=retry_backoff_ms, max_ms=retry_backoff_max_ms)
        self._rng = random.Random(seed)
        self.coordinator: CoordinatorNode | None = None
        self._lookup: asyncio.Task[CoordinatorNode] | None = None

    def backoff_ms(self, failures: int) -> float:
        return self._backoff.delay_ms(failures, self._rng)

    async def ask(self, request: Request, answer: type[_R], *, timeout_ms: float) -> _R:
        """`request` to the coordinator (looked up first if unknown). A transport failure
        forgets the coordinator and raises `GroupRetry`; the answer's own code is the caller's
        to check (`check_code`), though one saying the coordinator moved forgets it here."""
        coordinator = await self.find()
        try:
            response = await self._client.send(coordinator.address, request, timeout_ms=timeout_ms)
        except ClientClosedError:
            raise
        except _TRANSPORT_ERRORS as exc:
            self._forget(coordinator)
            raise GroupRetry(exc) from exc
        if not isinstance(response, answer):
            raise TypeError(f"{type(request).__name__} answered with {type(response).__name__}")
        if response.error in _COORDINATOR_GONE:
            self._forget(coordinator)
        return response

    async def find(self) -> CoordinatorNode:
        """The coordinator; one FindCoordinator attempt if it is unknown (`GroupRetry` when the
        answer is retriable or no broker answers)."""
        if self.coordinator is not None:
            return self.coordinator
        if self._lookup is None:
            self._lookup = asyncio.create_task(
                self._look_up(), name=f"FindCoordinator {self.group_id}"
            )
            self._lookup.add_done_callback(consume_outcome)
        lookup = self._lookup
        try:
            # Shielded: one waiter giving up (a cancelled heartbeat) must not end the lookup
            # the others wait for.
            return await asyncio.shield(lookup)
        finally:
            if lookup.done() and self._lookup is lookup:
                self._lookup = None

    async def _look_up(self) -> CoordinatorNode:
        try:
            found = await find_coordinator(
                self._client,
                COORDINATOR_GROUP,
                self.group_id,
                timeout_ms=self._request_timeout_ms,
            )
        except ClientClosedError:
            raise
        except KafkaError as exc:
            if not exc.retriable:
                raise
            raise GroupRetry(exc) from exc
        except _TRANSPORT_ERRORS as exc:
            raise GroupRetry(exc) from exc
        self.coordinator = found
        return found

    def _forget(self, coordinator: CoordinatorNode) -> None:
        if self.coordinator == coordinator:
            self.coordinator = None

    def check_part(self, code: ErrorCode, what: str) -> None:
        """`check_code` for a per-partition code (OffsetCommit and OffsetFetch answer per
        partition), which may also say that the coordinator moved."""
        if code in _COORDINATOR_GONE:
            self.coordinator = None
        check_code(code, what)

    async def send_once(self, request: Request, *, timeout_ms: float) -> bool:
        """One attempt to the coordinator as last known, without looking it up (LeaveGroup on
        the way out); False when there was none or it failed."""
        if self.coordinator is None:
            return False
        try:
            await self._client.send(self.coordinator.address, request, timeout_ms=timeout_ms)
        except _TRANSPORT_ERRORS:
            return False
        return True

    def close(self) -> None:
        lookup, self._lookup = self._lookup, None
        if lookup is not None and not lookup.done():
            lookup.cancel()

    async def retrying(
        self,
        attempt: Callable[[], Awaitable[_T]],
        *,
        timeout_ms: float,
        what: str,
        on_retry: Callable[[GroupRetry], None],
    ) -> _T:
        """`attempt()` until it succeeds, backing off between tries, within `timeout_ms`
        (then `DeliveryTimeoutError`); a `GroupRetry` asking for a rejoin goes to the caller.
        `on_retry` sees every failure first."""
        deadline_ns = self._clock.monotonic_ns() + round(timeout_ms * NS_PER_MS)
        failures = 0
        while True:
            try:
                return await attempt()
            except GroupRetry as retry:
                on_retry(retry)
                if retry.rejoin:
                    raise
                delay_ms = self.backoff_ms(failures)
                remaining_ms = (deadline_ns - self._clock.monotonic_ns()) / NS_PER_MS
                if delay_ms >= remaining_ms:
                    raise DeliveryTimeoutError(
                        f"{what} for group {self.group_id!r} did not succeed within "
                        f"{timeout_ms:.0f} ms: {retry}"
                    ) from retry.cause
                failures += 1
                await self._clock.sleep(delay_ms / 1000)
