"""Broker liveness (seed 004; KRaft's ClusterControlManager and BrokerHeartbeatManager):
registration, heartbeats, session expiry and fencing, and what follows a broker's startup or
failure; also the controller's own restart (`resume`).

A registration names the cluster the broker belongs to (its meta.properties' cluster.id); one
of another cluster is refused with INCONSISTENT_CLUSTER_ID, as Kafka's controller refuses it. A
broker that names none (its first start) is told the id in the answer and stores it.

ZooKeeper's part is played by registration and heartbeats: a registered broker is live until it
misses heartbeats for broker.session.timeout.ms (then it is fenced: onBrokerFailure) or asks to
be fenced at the end of its controlled shutdown (actors/controller/shutdown.py). A registration
from a new process of a live broker id is refused (DUPLICATE_BROKER_REGISTRATION) until the old
one's session ends — unless the old one is known to be gone, when it is fenced first, so that it
leaves every ISR and leadership (onBrokerFailure) before the new one registers and can only
rejoin an ISR by catching up:
  - it shut down in a controlled way; or
  - the new process holds the same log directories (the same directory ids as the registered
    incarnation, from their meta.properties). A directory is locked by the process using it, so
    the old process cannot still be writing them: it died (a kill -9 and a quick restart, as
    `ketch up` does in half a second). Kafka waits out the session here, stalling every acks=all
    write the dead incarnation's ISR membership holds back; ketch need not.
A registration that lacks a directory the broker registered before (wiped and recreated, so
with a new id; finding 9) takes the broker out of every ISR in the same commit
(`forget_lost_replicas`): an empty replacement log is never elected. Each registration gets a
new broker epoch, which the requests to that broker carry; a heartbeat
with another epoch, or from a fenced broker, is told to register again.

- Startup (`on_broker_startup`, Kafka's onBrokerStartup): the broker gets a session and a
  channel, its replicas go Online, partitions without a leader are elected, it is sent its full
  state (a FULL LeaderAndIsr) and every broker UpdateMetadata, and deletions waiting on it go on.
- Failure (`fence` then `on_broker_failure`): the fence is written first; the partitions the
  broker led go Offline and get a leader where one is electable; it leaves the other ISRs
  (never emptying one; a new partition epoch, the leader epoch stays as the leader does:
  KAFKA-15021); its replicas go Offline (or wait for deletion).

The sessions themselves (who is live, last heard from when, who is shutting down) are the
in-memory table of actors/controller/sessions.py.

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from actors.controller.context import ControllerContext
from actors.controller.election import offline_election, remove_from_isr
from actors.controller.elections import elect, elect_offline, electable, unclean_allowed
from actors.controller.journal import Change
from actors.controller.outbox import Outbox
from actors.controller.replica_failure import log_dirs_offline
from actors.controller.shutdown import still_led_by
from actors.controller.states import PartitionState, ReplicaKey, ReplicaState
from actors.controller.topic_deletion import resume_deletions
from actors.views import NO_LEADER
from wire.errors import ErrorCode
from wire.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from wire.metadata_records import Endpoint, FenceBrokerRecord, RegisterBrokerRecord
from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")


# -- registration and heartbeats -----------------------------------------------------------------


async def register(
    ctx: ControllerContext, request: BrokerRegistrationRequest
) -> BrokerRegistrationResponse:
    broker_id = request.broker_id
    cluster_id = ctx.model.cluster_id
    assert cluster_id is not None, "written when the controller started"
    if request.cluster_id and request.cluster_id != cluster_id:
        log.warning(
            "%s: broker %d of cluster %s refused: this is cluster %s",
            ctx.name,
            broker_id,
            request.cluster_id,
            cluster_id,
        )
        return BrokerRegistrationResponse(
            error_code=ErrorCode.INCONSISTENT_CLUSTER_ID, cluster_id=cluster_id
        )
    if broker_id < 0:
        return BrokerRegistrationResponse(error_code=ErrorCode.INVALID_REQUEST)
    existing = ctx.model.broker(broker_id)
    if existing is not None and ctx.sessions.is_live(broker_id):
        if existing.incarnation_id == request.incarnation_id:
            # A retried registration of the same process: the same answer.
            ctx.sessions.heard_from(broker_id, ctx.clock.monotonic_ms())
            return BrokerRegistrationResponse(
                broker_epoch=existing.broker_epoch, cluster_id=cluster_id
            )
        same_dirs = bool(existing.log_dirs) and tuple(request.log_dirs) == existing.log_dirs
        if not (ctx.sessions.is_shutting_down(broker_id) or same_dirs):
            log.warning(
                "%s: broker %d registering again while its session is alive: refused",
                ctx.name,
                broker_id,
            )
            return BrokerRegistrationResponse(error_code=ErrorCode.DUPLICATE_BROKER_REGISTRATION)
        # It shut down in a controlled way, or a new process holds its directories: the old
        # incarnation is gone, and is fenced at once.
        if same_dirs:
            log.info(
                "%s: broker %d restarted on the same log dirs: its previous incarnation fenced",
                ctx.name,
                broker_id,
            )
        await fence(ctx, [broker_id])
    epoch = ctx.model.next_broker_epoch()
    endpoints = tuple(Endpoint(lst.name, lst.host, lst.port) for lst in request.listeners)
    change = Change(ctx.model)
    if existing is not None and lost_log_dirs(existing.log_dirs, request.log_dirs):
        forget_lost_replicas(ctx, change, broker_id)
    change.add(
        RegisterBrokerRecord(
            broker_id,
            request.incarnation_id,
            epoch,
            endpoints,
            request.rack,
            fenced=False,
            log_dirs=tuple(request.log_dirs),
        )
    )
    await ctx.journal.commit(change)
    log.info("%s: broker %d registered with epoch %d", ctx.name, broker_id, epoch)
    await on_broker_startup(ctx, [broker_id])
    return BrokerRegistrationResponse(broker_epoch=epoch, cluster_id=cluster_id)


def lost_log_dirs(registered: Sequence[bytes], now: Sequence[bytes]) -> frozenset[bytes]:
    """The directories a broker registered before and does not bring back: each was replaced
    (wiped and recreated with a new meta.properties, hence a new id) or removed from log.dirs.
    A broker that registered none before (a first start, or one from before directory ids)
    proves nothing."""
    return frozenset(registered) - frozenset(now)


def forget_lost_replicas(ctx: ControllerContext, change: Change, broker_id: int) -> None:
    """The broker's replicas may have lost their data (issue 18, finding 9): it leaves every
    ISR, the last member too, and any leadership, in the same commit as its registration, so it
    is never electable on an empty replacement log. It rejoins an ISR only by catching up, like
    any follower. A partition whose ISR it was the last member of keeps an empty ISR and no
    leader: no replica is known to hold every acknowledged record any more, so only an unclean
    election (unclean.leader.election.enable) can bring it back, as after the loss of a
    partition's whole ISR in Kafka. Which partitions sat in the lost directory is not
    recorded (Kafka's KIP-858 keeps a directory per replica), so every replica on the broker is
    treated as lost: safe, at the price of re-replicating the survivors of another directory."""
    model = ctx.model
    forgotten = []
    for p in model.partitions_hosted_on(broker_id):
        if model.is_queued_for_deletion(p.topic_id) or broker_id not in p.isr:
            continue
        isr = tuple(r for r in p.isr if r != broker_id)
        leader = NO_LEADER if p.leader == broker_id or not isr else p.leader
        change.move(p, leader=leader, isr=isr)
        forgotten.append(model.topic_partition(p))
    log.warning(
        "%s: broker %d came back without log dirs it had registered: its replicas of %d "
        "partitions may be empty and leave their ISRs (%s)",
        ctx.name,
        broker_id,
        len(forgotten),
        ", ".join(str(tp) for tp in forgotten[:10]) + (" ..." if len(forgotten) > 10 else ""),
    )


async def heartbeat(
    ctx: ControllerContext, request: BrokerHeartbeatRequest
) -> BrokerHeartbeatResponse:
    broker_id = request.broker_id
    broker = ctx.model.broker(broker_id)
    if (
        broker is None
        or broker.broker_epoch != request.broker_epoch
        or not ctx.sessions.is_live(broker_id)
    ):
        # Unknown, a previous incarnation, or fenced: the broker registers again.
        return BrokerHeartbeatResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, is_fenced=True)
    ctx.sessions.heard_from(broker_id, ctx.clock.monotonic_ms())
    if ctx.sessions.report_offline_dirs(broker_id, frozenset(request.offline_log_dirs)):
        log_dirs_offline(ctx, broker_id)
    done_shutting_down = ctx.sessions.is_shutting_down(broker_id) and not still_led_by(
        ctx, broker_id
    )
    if request.want_fence or (request.want_shut_down and done_shutting_down):
        await fence(ctx, [broker_id])
        return BrokerHeartbeatResponse(is_fenced=True, should_shut_down=True)
    return BrokerHeartbeatResponse(is_caught_up=True, is_fenced=False)


async def session_tick(ctx: ControllerContext) -> None:
    """Fence the brokers whose sessions expired."""
    timeout = ctx.config.broker_session_timeout_ms
    expired = ctx.sessions.expired(ctx.clock.monotonic_ms(), timeout)
    if expired:
        log.warning("%s: brokers %s missed heartbeats for %d ms", ctx.name, expired, timeout)
        await fence(ctx, expired)


async def fence(ctx: ControllerContext, dead: list[int]) -> None:
    """Fence the brokers (written first), then onBrokerFailure."""
    change = Change(ctx.model)
    for broker_id in dead:
        broker = ctx.model.broker(broker_id)
        assert broker is not None, broker_id
        change.add(FenceBrokerRecord(broker_id, broker.broker_epoch))
        ctx.sessions.close(broker_id)
        ctx.sender.remove_broker(broker_id)
        # Its failed deletions wait for its next registration, as its other deletions do.
        ctx.deletion_retries.forget(broker_id)
    await on_broker_failure(ctx, dead, change)


# -- broker startup and failure (seed 004) --------------------------------------------------------


async def on_broker_startup(ctx: ControllerContext, new: list[int]) -> None:
    now = ctx.clock.monotonic_ms()
    for broker_id in new:
        ctx.sessions.open(broker_id, now)
        ctx.sender.remove_broker(broker_id)  # a previous incarnation's channel
        ctx.sender.add_broker(broker_id)
        ctx.deletion_retries.forget(broker_id)  # `resume_deletions` below resends them
    outbox = Outbox(metadata_everything=True)
    change = Change(ctx.model)
    for broker_id in new:
        keys = [
            ReplicaKey(ctx.model.topic_partition(p), broker_id)
            for p in ctx.model.partitions_hosted_on(broker_id)
            if not ctx.model.is_queued_for_deletion(p.topic_id)
        ]
        ctx.replica_states.transition(keys, ReplicaState.ONLINE)
    elect_offline(ctx, change)
    await ctx.journal.commit(change)
    ctx.sender.announce(change, outbox)
    for broker_id in new:
        ctx.sender.send_full_state(outbox, broker_id)
    ctx.sender.flush(outbox)
    await resume_deletions(ctx, new)


async def on_broker_failure(ctx: ControllerContext, dead: list[int], change: Change) -> None:
    gone = set(dead)
    model = ctx.model
    outbox = Outbox(metadata_everything=True)
    eligible = ctx.sessions.eligible()
    # Partitions led by the dead brokers go offline, then get a leader where they can.
    led = [
        p
        for p in model.all_partitions()
        if p.leader in gone and not model.is_queued_for_deletion(p.topic_id)
    ]
    ctx.partition_states.transition([model.topic_partition(p) for p in led], PartitionState.OFFLINE)
    elected = [
        model.topic_partition(p)
        for p in led
        if elect(
            ctx,
            change,
            p,
            offline_election(
                p.replicas,
                p.isr,
                electable(ctx, model.topic_partition(p), eligible),
                unclean_allowed(ctx, p),
            ),
            gone,
        )
    ]
    ctx.partition_states.transition(elected, PartitionState.ONLINE)
    # Followers on the dead brokers leave the ISRs (never emptying one).
    for p in model.all_partitions():
        if (
            p.leader not in gone
            and gone & set(p.isr)
            and not model.is_queued_for_deletion(p.topic_id)
        ):
            isr = p.isr
            for broker_id in sorted(gone):
                isr = remove_from_isr(isr, broker_id)
            change.move(p, isr=isr)
    replicas = [
        ReplicaKey(model.topic_partition(p), b) for b in dead for p in model.partitions_hosted_on(b)
    ]
    deleting = {k for k in replicas if model.is_queued_for_deletion(_topic_id(ctx, k.partition))}
    ctx.replica_states.transition([k for k in replicas if k not in deleting], ReplicaState.OFFLINE)
    ctx.replica_states.transition(list(deleting), ReplicaState.REPLICA_DELETION_INELIGIBLE)
    await ctx.journal.commit(change)
    ctx.sender.announce(change, outbox)
    ctx.sender.flush(outbox)


def _topic_id(ctx: ControllerContext, tp: TopicPartition) -> bytes:
    topic = ctx.model.topic_by_name(tp.topic)
    assert topic is not None, tp
    return topic.topic_id


# -- the controller's own (re)start ---------------------------------------------------------------


async def resume(ctx: ControllerContext) -> None:
    """After a (re)start: the brokers the log says are live get a grace session from now,
    a channel, and the whole state (FULL LeaderAndIsr, UpdateMetadata) under the new epoch;
    then elections and deletions pick up where the previous controller left them."""
    now = ctx.clock.monotonic_ms()
    live = ctx.model.unfenced_broker_ids()
    for broker_id in live:
        ctx.sessions.open(broker_id, now)
        ctx.sender.add_broker(broker_id)
    _initialize_states(ctx)
    outbox = Outbox()
    for broker_id in live:
        ctx.sender.send_full_state(outbox, broker_id)
    outbox.metadata_everything = True
    change = Change(ctx.model)
    elect_offline(ctx, change)
    await ctx.journal.commit(change)
    ctx.sender.announce(change, outbox)
    ctx.sender.flush(outbox)
    await resume_deletions(ctx, live)


def _initialize_states(ctx: ControllerContext) -> None:
    """The state machines as the model and the new sessions say (Kafka's
    initializePartitionState and initializeReplicaState)."""
    live = ctx.sessions.live()
    partitions: dict[TopicPartition, PartitionState] = {}
    replicas: dict[ReplicaKey, ReplicaState] = {}
    for p in ctx.model.all_partitions():
        tp = ctx.model.topic_partition(p)
        deleting = ctx.model.is_queued_for_deletion(p.topic_id)
        online = not deleting and p.leader != NO_LEADER and p.leader in live
        partitions[tp] = PartitionState.ONLINE if online else PartitionState.OFFLINE
        for r in p.replicas:
            if deleting:
                state = ReplicaState.REPLICA_DELETION_INELIGIBLE
            else:
                state = ReplicaState.ONLINE if r in live else ReplicaState.OFFLINE
            replicas[ReplicaKey(tp, r)] = state
    ctx.partition_states.initialize(partitions)
    ctx.replica_states.initialize(replicas)
