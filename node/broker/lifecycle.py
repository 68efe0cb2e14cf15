"""`BrokerLifecycle`: the broker's side of the controller's liveness protocol.

The controller learns which brokers are alive from registrations and heartbeats (they replace
ZooKeeper's ephemeral `/brokers/ids` nodes, seed 004). This module is what a broker does about it,
in the manner of Kafka's KRaft `BrokerLifecycleManager` and of the ZooKeeper-era
`KafkaServer.controlledShutdown`:

* **Registration.** On start the broker sends BrokerRegistration (broker id, cluster id, a random
  incarnation id drawn once per process, its listeners, the previous broker epoch) until the
  controller answers NONE, waiting an exponential backoff (100 ms doubling up to half of
  broker.session.timeout.ms, as Kafka) between attempts. The answer's broker epoch goes to the
  node (`on_registered`), which fences control requests meant for an older incarnation.
* **Cluster id.** The registration names the cluster the broker belongs to (`cluster_id`: its
  cluster.id, else its log dirs' meta.properties), or none on its first start. A broker of
  another cluster is refused with INCONSISTENT_CLUSTER_ID: that needs an operator (the broker
  was pointed at the wrong controller, or its log dir is another cluster's), so it does not
  retry. It logs both ids and tells the node (`on_refused`), whose process exits with the
  configuration-error code (node/process.py's EXIT_CONFIG: a restart cannot cure it), as Kafka
  refuses to start a broker whose meta.properties names another cluster. A broker that named
  none is told the controller's id in the answer and stores it (`on_cluster_id`, into its
  meta.properties) before anything else happens.
* **Heartbeats** every broker.heartbeat.interval.ms, counted from when the previous one was sent
  (a slow answer does not stretch the cadence), carrying the current broker epoch. An answer of
  STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED means the controller no longer knows this
  registration (it restarted without it, or fenced the broker and a newer registration won):
  the broker registers again at once and gets a new epoch. A heartbeat that cannot reach the
  controller is retried after the backoff. Nothing is ever torn down meanwhile: the broker keeps
  serving produce and fetch with the leadership it has (DESIGN.md, "Replication semantics").
* **Controlled shutdown** (`controlled_shutdown()`, called by the node's clean stop before
  anything stops): ControlledShutdown is sent, and sent again after
  controlled.shutdown.retry.backoff.ms while the controller answers with an error, cannot be
  reached, or still lists partitions this broker leads; after controlled.shutdown.max.retries
  attempts the broker shuts down regardless, as Kafka does. Kafka also sleeps the backoff after
  the last failed attempt; that wait delays the exit for nothing, so it is skipped here.
  Heartbeats continue during the attempts, so the controller does not take the broker for dead
  while it is moving its leadership away. A broker that is not registered skips it: the
  controller does not count it as live, so there is no leadership to move.

The states form a table (`_TRANSITIONS`); a move it does not list is a bug and raises.

The same credentialed channel (`ControllerChannel`) also carries the admin requests the broker
forwards to the controller (node/broker/forwarder.py, KIP-590).

Ownership and why no lock: the lifecycle's state and broker epoch are changed only by its own
background task and by `controlled_shutdown()` / `stop()`, all on the event loop thread; every
change re-checks the state after the await that preceded it, so an answer that arrives after a
shutdown began is dropped instead of applied. All waiting is on the injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from client.errors import ClientError
from runtime.clock import NS_PER_MS, Clock
from runtime.net.backoff import ExponentialBackoff
from runtime.properties import config_from_properties
from wire.errors import ErrorCode
from wire.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    Request,
    Response,
)

log = logging.getLogger(__name__)

NO_BROKER_EPOCH: Final = -1

# Kafka's BrokerLifecycleManager resend backoff: 100 ms, doubling, capped at half the session
# timeout so a broker that lost the controller still gets through well before it is fenced.
_INITIAL_BACKOFF_MS: Final = 100
_BACKOFF_JITTER: Final = 0.02

# A heartbeat answered with one of these means the controller does not hold this registration.
_REGISTRATION_LOST: Final = frozenset(
    {ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED}
)


# -- configuration --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerLifecycleConfig:
    """The lifecycle's settings; each field is the snake_case form of the property beside it."""

    # cluster.id: the cluster this broker belongs to ("" = not set: the log dirs'
    # meta.properties say, else the controller, at the first registration).
    cluster_id: str = ""
    # broker.heartbeat.interval.ms
    broker_heartbeat_interval_ms: int = 2_000
    # broker.session.timeout.ms: the controller's; the broker caps its resend backoff at half.
    broker_session_timeout_ms: int = 9_000
    # controlled.shutdown.enable
    controlled_shutdown_enable: bool = True
    # controlled.shutdown.max.retries: attempts in all (Kafka's meaning of the name).
    controlled_shutdown_max_retries: int = 3
    # controlled.shutdown.retry.backoff.ms
    controlled_shutdown_retry_backoff_ms: int = 5_000

    def __post_init__(self) -> None:
        if self.broker_heartbeat_interval_ms < 1:
            raise ValueError(
                f"broker.heartbeat.interval.ms must be >= 1: {self.broker_heartbeat_interval_ms}"
            )
        if self.broker_session_timeout_ms < 1:
            raise ValueError(
                f"broker.session.timeout.ms must be >= 1: {self.broker_session_timeout_ms}"
            )
        if self.controlled_shutdown_max_retries < 0:
            raise ValueError(
                "controlled.shutdown.max.retries must not be negative: "
                f"{self.controlled_shutdown_max_retries}"
            )
        if self.controlled_shutdown_retry_backoff_ms < 0:
            raise ValueError(
                "controlled.shutdown.retry.backoff.ms must not be negative: "
                f"{self.controlled_shutdown_retry_backoff_ms}"
            )

    @property
    def resend_backoff(self) -> ExponentialBackoff:
        cap_ms = max(_INITIAL_BACKOFF_MS, self.broker_session_timeout_ms // 2)
        return ExponentialBackoff(_INITIAL_BACKOFF_MS, cap_ms, jitter=_BACKOFF_JITTER)

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> BrokerLifecycleConfig:
        """Read Kafka's property names; other keys belong to other parts of the node."""
        return config_from_properties(cls, properties)


# -- the channel to the controller ----------------------------------------------------------------


class ControllerChannel(Protocol):
    """One request to the controller, over a connection holding the cluster credential.

    Raises the client's typed errors (`ClientError`) when the controller cannot be reached or
    does not answer within `timeout_ms` (default: the client's request.timeout.ms).
    """

    async def send(self, request: Request, *, timeout_ms: float | None = None) -> Response: ...


# -- states ---------------------------------------------------------------------------------------


class LifecycleState(enum.Enum):
    NEW = "new"
    REGISTERING = "registering"  # no registration the controller holds (yet, or any more)
    REGISTERED = "registered"  # heartbeating with the epoch of the last registration
    SHUTTING_DOWN = "shutting-down"  # controlled shutdown begun; heartbeats go on, no re-register
    REFUSED = "refused"  # the controller is of another cluster: nothing more is sent
    STOPPED = "stopped"


_TRANSITIONS: Final[Mapping[tuple[LifecycleState, str], LifecycleState]] = {
    (LifecycleState.NEW, "start"): LifecycleState.REGISTERING,
    (LifecycleState.REGISTERING, "registered"): LifecycleState.REGISTERED,
    (LifecycleState.REGISTERING, "refused"): LifecycleState.REFUSED,
    (LifecycleState.REGISTERED, "registration_lost"): LifecycleState.REGISTERING,
    (LifecycleState.REGISTERING, "shut_down"): LifecycleState.SHUTTING_DOWN,
    (LifecycleState.REGISTERED, "shut_down"): LifecycleState.SHUTTING_DOWN,
    (LifecycleState.NEW, "stop"): LifecycleState.STOPPED,
    (LifecycleState.REGISTERING, "stop"): LifecycleState.STOPPED,
    (LifecycleState.REGISTERED, "stop"): LifecycleState.STOPPED,
    (LifecycleState.SHUTTING_DOWN, "stop"): LifecycleState.STOPPED,
    (LifecycleState.REFUSED, "stop"): LifecycleState.STOPPED,
}


class IllegalLifecycleTransitionError(RuntimeError):
    pass


class _Heartbeat(enum.Enum):
    ANSWERED = "answered"
    REGISTRATION_LOST = "registration-lost"
    FAILED = "failed"


# -- the lifecycle --------------------------------------------------------------------------------

Listeners = Callable[[], Sequence[BrokerRegistrationListener]]
OnRegistered = Callable[[int], Awaitable[None]]
ClusterId = Callable[[], str | None]
OnClusterId = Callable[[str], None]
OnRefused = Callable[[str], None]


def _ignore(_: str) -> None:
    pass


class BrokerLifecycle:
    """`await start()` (returns at once; registration runs in the background), then
    `await controlled_shutdown()` and `await stop()`."""

    def __init__(
        self,
        broker_id: int,
        config: BrokerLifecycleConfig,
        *,
        channel: ControllerChannel,
        clock: Clock,
        listeners: Listeners,
        on_registered: OnRegistered,
        log_dirs: Callable[[], Sequence[bytes]] = tuple,
        offline_log_dirs: Callable[[], Sequence[bytes]] = tuple,
        cluster_id: ClusterId | None = None,
        on_cluster_id: OnClusterId = _ignore,
        on_refused: OnRefused = _ignore,
        incarnation_id: bytes | None = None,
        seed: int | None = None,
    ) -> None:
        """`log_dirs`: the ids of the broker's log directories, read at each registration (the
        dirs are opened before the lifecycle starts); `offline_log_dirs`: the ids of those that
        failed since, read at each heartbeat (KRaft's OfflineLogDirs). `cluster_id`: the cluster
        the broker knows it belongs to, read at each registration (default: cluster.id);
        `on_cluster_id` gets the controller's when it knew none, `on_refused` the reason when
        the controller is of another cluster (module docstring)."""
        self.broker_id = broker_id
        self.config = config
        self._channel = channel
        self._clock = clock
        self._listeners = listeners
        self._on_registered = on_registered
        self._log_dirs = log_dirs
        self._offline_log_dirs = offline_log_dirs
        self._cluster_id = cluster_id if cluster_id is not None else lambda: config.cluster_id
        self._on_cluster_id = on_cluster_id
        self._on_refused = on_refused
        # Random per process start: the controller tells a restarted broker (new incarnation)
        # from this process retrying its own registration (same incarnation).
        self.incarnation_id = incarnation_id if incarnation_id is not None else uuid.uuid4().bytes
        self._rng = random.Random(broker_id if seed is None else seed)
        self._backoff = config.resend_backoff
        self.state = LifecycleState.NEW
        self.broker_epoch = NO_BROKER_EPOCH
        self._previous_epoch = NO_BROKER_EPOCH
        self._task: asyncio.Task[None] | None = None
        # What the last heartbeat answer said (KRaft fields; ketch's controller may use them).
        self.is_fenced = True
        self.should_shut_down = False
        # Counters, for tests and for `cluster status`.
        self.registrations = 0
        self.registration_attempts = 0
        self.heartbeats_sent = 0
        self.heartbeat_failures = 0
        self.controlled_shutdown_attempts = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def _move(self, event: str) -> None:
        target = _TRANSITIONS.get((self.state, event))
        if target is None:
            raise IllegalLifecycleTransitionError(
                f"broker {self.broker_id} lifecycle: {event} while {self.state.value}"
            )
        self.state = target

    async def start(self) -> None:
        self._move("start")
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"broker-lifecycle@{self.broker_id}"
        )
        self._task.add_done_callback(self._task_ended)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            # A bug: the broker keeps serving, but the controller will stop hearing from it.
            log.error(
                "broker %d: registration/heartbeat task failed",
                self.broker_id,
                exc_info=task.exception(),
            )

    async def stop(self) -> None:
        """Stop registering and heartbeating; sends nothing. Idempotent."""
        if self.state is not LifecycleState.STOPPED:
            self._move("stop")
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def registered(self) -> bool:
        return self.state is LifecycleState.REGISTERED

    @property
    def refused(self) -> bool:
        """The controller is of another cluster: this broker sends it nothing more."""
        return self.state is LifecycleState.REFUSED

    # -- background: register, then heartbeat -------------------------------------------------

    async def _run(self) -> None:
        failures = 0  # consecutive failed sends, for the backoff
        while True:
            started_ns = self._clock.monotonic_ns()
            if self.state is LifecycleState.REGISTERING:
                if await self._register_once():
                    failures = 0
                    continue  # the first heartbeat goes at once, as Kafka's
                if self.refused:
                    return
                next_ns = self._clock.monotonic_ns() + self._backoff_ns(failures)
                failures += 1
            elif self.state is LifecycleState.REGISTERED or (
                self.state is LifecycleState.SHUTTING_DOWN and self.broker_epoch != NO_BROKER_EPOCH
            ):
                outcome = await self._heartbeat_once()
                if outcome is _Heartbeat.ANSWERED:
                    failures = 0
                    next_ns = started_ns + self.config.broker_heartbeat_interval_ms * NS_PER_MS
                elif outcome is _Heartbeat.REGISTRATION_LOST:
                    if self.state is not LifecycleState.REGISTERED:
                        # Shutting down: registering anew would announce a broker that is
                        # leaving. The controller will treat it as gone.
                        return
                    self._move("registration_lost")
                    failures = 0
                    continue
                else:
                    next_ns = self._clock.monotonic_ns() + self._backoff_ns(failures)
                    failures += 1
            else:
                return  # shutting down unregistered, or stopped
            wait_ns = next_ns - self._clock.monotonic_ns()
            if wait_ns > 0:
                await self._clock.sleep(wait_ns / 1e9)

    def _backoff_ns(self, failures: int) -> int:
        return round(self._backoff.delay_ms(failures, self._rng) * NS_PER_MS)

    async def _register_once(self) -> bool:
        known = self._cluster_id() or ""
        request = BrokerRegistrationRequest(
            broker_id=self.broker_id,
            cluster_id=known,
            incarnation_id=self.incarnation_id,
            listeners=list(self._listeners()),
            previous_broker_epoch=self._previous_epoch,
            log_dirs=list(self._log_dirs()),
        )
        self.registration_attempts += 1
        try:
            response = await self._channel.send(request)
        except ClientError as exc:
            log.info("broker %d: controller unreachable for registration: %s", self.broker_id, exc)
            return False
        assert isinstance(response, BrokerRegistrationResponse), response
        if self.state is not LifecycleState.REGISTERING:
            return False  # shutdown began meanwhile: the answer no longer matters
        if response.error is ErrorCode.INCONSISTENT_CLUSTER_ID or (
            response.error is ErrorCode.NONE and known and response.cluster_id not in ("", known)
        ):
            self._refuse(known, response.cluster_id)
            return False
        if response.error is not ErrorCode.NONE:
            # DUPLICATE_BROKER_REGISTRATION: the previous incarnation's session has not expired
            # yet; it will. Anything else (authorization) needs an operator, and retrying is how
            # the broker notices the fix.
            log.warning(
                "broker %d: registration refused with %s; retrying",
                self.broker_id,
                response.error.name,
            )
            return False
        if not known and response.cluster_id:
            log.info("broker %d: joining cluster %s", self.broker_id, response.cluster_id)
            self._on_cluster_id(response.cluster_id)
        self._move("registered")
        self.broker_epoch = response.broker_epoch
        self._previous_epoch = response.broker_epoch
        self.registrations += 1
        self.is_fenced = True
        log.info("broker %d registered with broker epoch %d", self.broker_id, self.broker_epoch)
        await self._on_registered(response.broker_epoch)
        return True

    def _refuse(self, known: str, controllers: str) -> None:
        self._move("refused")
        reason = (
            f"broker {self.broker_id} belongs to cluster {known or '(none)'} (its cluster.id or "
            f"its log dirs' meta.properties), the controller to cluster "
            f"{controllers or '(unknown)'}: "
            "refusing to join another cluster (INCONSISTENT_CLUSTER_ID)"
        )
        log.critical("%s", reason)
        self._on_refused(reason)

    async def _heartbeat_once(self) -> _Heartbeat:
        request = BrokerHeartbeatRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            want_shut_down=self.state is LifecycleState.SHUTTING_DOWN,
            offline_log_dirs=list(self._offline_log_dirs()),
        )
        self.heartbeats_sent += 1
        try:
            response = await self._channel.send(request)
        except ClientError as exc:
            self.heartbeat_failures += 1
            log.info("broker %d: heartbeat did not reach the controller: %s", self.broker_id, exc)
            return _Heartbeat.FAILED
        assert isinstance(response, BrokerHeartbeatResponse), response
        if response.error in _REGISTRATION_LOST:
            log.log(
                logging.INFO if request.want_shut_down else logging.WARNING,
                "broker %d: controller answered %s to epoch %d; %s",
                self.broker_id,
                response.error.name,
                request.broker_epoch,
                "it let go of the broker" if request.want_shut_down else "registering again",
            )
            return _Heartbeat.REGISTRATION_LOST
        if response.error is not ErrorCode.NONE:
            self.heartbeat_failures += 1
            log.warning("broker %d: heartbeat answered %s", self.broker_id, response.error.name)
            return _Heartbeat.FAILED
        self.is_fenced = response.is_fenced
        self.should_shut_down = response.should_shut_down
        return _Heartbeat.ANSWERED

    # -- controlled shutdown ------------------------------------------------------------------

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leadership away; True once it has.

        Returns False without sending when controlled.shutdown.enable is false, when the
        broker is not registered, or when it has run already; and after
        controlled.shutdown.max.retries failed attempts. The caller shuts down either way.
        """
        if not self.config.controlled_shutdown_enable or self.state is LifecycleState.SHUTTING_DOWN:
            return False  # disabled, or done already (successful or not)
        if self.state is not LifecycleState.REGISTERED:
            log.info(
                "broker %d: not registered (%s); skipping controlled shutdown",
                self.broker_id,
                self.state.value,
            )
            if self.state is LifecycleState.REGISTERING:
                self._move("shut_down")
            return False
        self._move("shut_down")
        attempts = self.config.controlled_shutdown_max_retries
        for attempt in range(1, attempts + 1):
            if await self._controlled_shutdown_once():
                log.info("broker %d: controlled shutdown succeeded", self.broker_id)
                # One heartbeat asking to shut down: with nothing left to move, the controller
                # fences the broker at once (KRaft's shouldShutDown), instead of listing a broker
                # that has exited as alive (and as the leader of its lone replicas) until its
                # session times out. Best effort: the broker stops whatever the answer.
                await self._heartbeat_once()
                return True
            if attempt < attempts:
                log.warning(
                    "broker %d: controlled shutdown attempt %d/%d failed; retrying in %d ms",
                    self.broker_id,
                    attempt,
                    attempts,
                    self.config.controlled_shutdown_retry_backoff_ms,
                )
                await self._clock.sleep(self.config.controlled_shutdown_retry_backoff_ms / 1000)
        log.warning(
            "broker %d: every controlled shutdown attempt failed; shutting down regardless",
            self.broker_id,
        )
        return False

    async def _controlled_shutdown_once(self) -> bool:
        self.controlled_shutdown_attempts += 1
        request = ControlledShutdownRequest(
            broker_id=self.broker_id, broker_epoch=self.broker_epoch
        )
        try:
            response = await self._channel.send(request)
        except ClientError as exc:
            log.warning("broker %d: controlled shutdown request failed: %s", self.broker_id, exc)
            return False
        assert isinstance(response, ControlledShutdownResponse), response
        if response.error is not ErrorCode.NONE:
            log.warning(
                "broker %d: controlled shutdown answered %s", self.broker_id, response.error.name
            )
            return False
        if response.remaining_partitions:
            remaining = sorted(
                f"{p.topic_name}-{p.partition_index}" for p in response.remaining_partitions
            )
            log.info("broker %d: partitions still to move: %s", self.broker_id, remaining)
            return False
        return True
