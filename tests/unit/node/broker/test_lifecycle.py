"""The broker's side of the controller: registration, heartbeats, re-registration and controlled
shutdown, against the small fake controller of conftest.py (simulated time, exact)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from node.broker.config import BrokerConfig
from node.broker.lifecycle import BrokerLifecycleConfig, LifecycleState
from node.broker.node import NodeState
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from tests.unit.node.broker.fake_controller import (
    FIRST_EPOCH,
    HEARTBEAT_MS,
    SHUTDOWN_BACKOFF_MS,
    Env,
    registered,
    remaining,
)
from wire.errors import ErrorCode
from wire.messages import (
    BrokerRegistrationListener,
    ControlledShutdownResponse,
)


async def test_serves_before_registration_then_registers_and_heartbeats(env: Env) -> None:
    env.controller.hold_registration = asyncio.Event()
    node = env.node()
    await env.drive(node.start())
    await env.run_until(lambda: bool(env.controller.registrations), max_ms=10, what="register")
    # The registration is not answered yet, and the broker already serves.
    assert await env.metadata_answered()
    assert node.broker_epoch == -1
    env.controller.hold_registration.set()
    await env.run_until(registered(node), max_ms=10, what="registered")
    assert node.broker_epoch == FIRST_EPOCH

    _, request = env.controller.registrations[0]
    assert request.broker_id == 0
    assert request.cluster_id == "test-cluster"
    assert request.previous_broker_epoch == -1
    assert len(request.incarnation_id) == 16
    assert request.listeners == [
        BrokerRegistrationListener(name="native", host="broker-0", port=9092)
    ]

    start_ms = env.clock.monotonic_ms()
    await env.run_for(5 * HEARTBEAT_MS)
    # The first heartbeat goes at once, then one per interval, each with the epoch.
    assert env.controller.heartbeats == [
        (start_ms + i * HEARTBEAT_MS, FIRST_EPOCH) for i in range(6)
    ]
    assert len(env.controller.registrations) == 1
    assert node.lifecycle is not None
    assert node.lifecycle.is_fenced is False


async def test_a_new_process_registers_with_a_new_incarnation(env: Env) -> None:
    first = env.node()
    await env.drive(first.start())
    await env.run_until(registered(first), max_ms=10, what="first registered")
    await env.drive(first.stop())
    second = env.node()
    await env.drive(second.start())
    await env.run_until(registered(second), max_ms=10, what="second registered")
    [(_, one), (_, two)] = env.controller.registrations
    assert one.incarnation_id != two.incarnation_id
    assert second.broker_epoch == FIRST_EPOCH + 1
    # Same log dirs, same identities: the new process says it holds the old one's data.
    assert one.log_dirs == two.log_dirs == list(second.log_manager.directory_ids())
    assert len(one.log_dirs) == len(second.config.log.log_dirs) >= 1
    await env.drive(second.stop())


async def test_stale_broker_epoch_registers_again_with_a_new_epoch(env: Env) -> None:
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    assert node.broker_epoch == FIRST_EPOCH
    env.controller.forget()  # e.g. the controller restarted without this registration
    await env.run_until(
        lambda: len(env.controller.registrations) == 2 and registered(node)(),
        max_ms=2 * HEARTBEAT_MS,
        what="registered again",
    )
    _, again = env.controller.registrations[1]
    assert again.previous_broker_epoch == FIRST_EPOCH
    assert node.broker_epoch == FIRST_EPOCH + 1
    assert again.incarnation_id == env.controller.registrations[0][1].incarnation_id
    # The heartbeat after the stale one carries the new epoch.
    stale_at = next(i for i, (_, e) in enumerate(env.controller.heartbeats) if e == FIRST_EPOCH)
    await env.run_for(2 * HEARTBEAT_MS)
    later = [epoch for _, epoch in env.controller.heartbeats[stale_at + 1 :]]
    assert FIRST_EPOCH + 1 in later
    assert later[later.index(FIRST_EPOCH + 1) :] == [FIRST_EPOCH + 1] * len(
        later[later.index(FIRST_EPOCH + 1) :]
    )


async def test_unreachable_controller_keeps_the_broker_serving_and_retrying(env: Env) -> None:
    await env.controller.stop()
    node = env.node()
    await env.drive(node.start())
    await env.run_for(2_000)
    lifecycle = node.lifecycle
    assert lifecycle is not None
    # Nothing answered, the broker retried with backoff (100, 200, 400, ... ms, capped), and
    # serves all the while.
    assert lifecycle.state is LifecycleState.REGISTERING
    assert 4 <= lifecycle.registration_attempts <= 8, lifecycle.registration_attempts
    assert await env.metadata_answered()

    await env.controller.start()
    await env.run_until(registered(node), max_ms=5_000, what="registered after return")
    assert node.broker_epoch == FIRST_EPOCH

    # Registered, then the controller goes away again: heartbeats fail, nothing is torn down.
    await env.controller.stop()
    failures_before = lifecycle.heartbeat_failures
    await env.run_for(1_000)
    assert lifecycle.heartbeat_failures > failures_before
    assert registered(node)()
    assert node.state is NodeState.RUNNING
    assert await env.metadata_answered()

    # It comes back having lost the registration: the broker registers again.
    env.controller.forget()
    await env.controller.start()
    await env.run_until(
        lambda: node.broker_epoch == FIRST_EPOCH + 1, max_ms=10_000, what="registered again"
    )
    await env.drive(node.stop())


async def test_refused_registration_is_retried(env: Env) -> None:
    env.controller.refuse_registration = ErrorCode.DUPLICATE_BROKER_REGISTRATION
    node = env.node()
    await env.drive(node.start())
    await env.run_for(1_000)
    assert len(env.controller.registrations) >= 3
    assert node.broker_epoch == -1
    assert not env.controller.heartbeats
    env.controller.refuse_registration = None  # the previous incarnation's session expired
    await env.run_until(registered(node), max_ms=5_000, what="registered")
    # Unregistered at the stop: no ControlledShutdown would have been sent; registered: one.
    await env.drive(node.stop())
    assert len(env.controller.shutdowns) == 1


async def test_without_lifecycle_nothing_is_sent(env: Env) -> None:
    node = env.node(lifecycle=False)
    await env.drive(node.start())
    await env.run_for(500)
    await env.drive(node.stop())
    assert env.controller.registrations == []
    assert env.controller.shutdowns == []


# -- controlled shutdown --------------------------------------------------------------------------


async def test_controlled_shutdown_retries_while_partitions_remain(env: Env) -> None:
    env.controller.shutdown_answers = [remaining(0, 1), remaining(1)]
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    lifecycle = node.lifecycle
    assert lifecycle is not None
    task = asyncio.ensure_future(lifecycle.controlled_shutdown())
    assert await env.drive(task) is True
    times = [t for t, _ in env.controller.shutdowns]
    assert [b - a for a, b in itertools.pairwise(times)] == [SHUTDOWN_BACKOFF_MS] * 2
    assert [e for _, e in env.controller.shutdowns] == [FIRST_EPOCH] * 3
    # Heartbeats went on while leadership moved, so the controller never took it for dead.
    during = [t for t, _ in env.controller.heartbeats if times[0] <= t <= times[-1]]
    assert len(during) >= 2 * SHUTDOWN_BACKOFF_MS // HEARTBEAT_MS - 1
    await env.drive(node.stop())


async def test_a_finished_controlled_shutdown_asks_to_be_shut_down_at_once(env: Env) -> None:
    """Done moving its leadership, the broker asks to be shut down in a heartbeat at once (the
    controller then fences it), not at its next heartbeat interval, which it does not live to
    see: an exited broker would be listed alive, and lead its lone replicas, for a session."""
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    await env.run_for(HEARTBEAT_MS // 2)  # between two heartbeats
    lifecycle = node.lifecycle
    assert lifecycle is not None
    assert await env.drive(lifecycle.controlled_shutdown()) is True
    [(done_at, _)] = env.controller.shutdowns
    asked = [
        t
        for (t, _), request in zip(
            env.controller.heartbeats, env.controller.heartbeat_requests, strict=True
        )
        if request.want_shut_down
    ]
    assert asked == [done_at]
    await env.drive(node.stop())


async def test_controlled_shutdown_gives_up_after_max_retries(env: Env) -> None:
    env.controller.shutdown_answers = [
        ControlledShutdownResponse.error_response(ErrorCode.NOT_CONTROLLER),
        remaining(3),
        remaining(3),
        remaining(3),
    ]
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    lifecycle = node.lifecycle
    assert lifecycle is not None
    start_ms = env.clock.monotonic_ms()
    assert await env.drive(lifecycle.controlled_shutdown()) is False
    times = [t for t, _ in env.controller.shutdowns]
    assert times == [start_ms, start_ms + SHUTDOWN_BACKOFF_MS, start_ms + 2 * SHUTDOWN_BACKOFF_MS]
    # No backoff after the last attempt: it gives up as soon as the third answer is in.
    assert env.clock.monotonic_ms() == times[-1]
    assert lifecycle.controlled_shutdown_attempts == 3
    # The node's stop does not ask again, and shuts down cleanly.
    await env.drive(node.stop())
    assert lifecycle.controlled_shutdown_attempts == 3
    assert (env.tmp_path / "broker-0" / CLEAN_SHUTDOWN_FILE).exists()
    assert env.controller.shutdown_answers == [remaining(3)]  # the fourth was never asked


async def test_controlled_shutdown_with_the_controller_unreachable(env: Env) -> None:
    node = env.node({"controlled.shutdown.max.retries": 2})
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    await env.controller.stop()
    lifecycle = node.lifecycle
    assert lifecycle is not None
    assert await env.drive(lifecycle.controlled_shutdown()) is False
    assert lifecycle.controlled_shutdown_attempts == 2
    await env.drive(node.stop())
    assert (env.tmp_path / "broker-0" / CLEAN_SHUTDOWN_FILE).exists()


async def test_controlled_shutdown_disabled_sends_nothing(env: Env) -> None:
    node = env.node({"controlled.shutdown.enable": "false"})
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    await env.drive(node.stop())
    assert env.controller.shutdowns == []
    assert (env.tmp_path / "broker-0" / CLEAN_SHUTDOWN_FILE).exists()


async def test_crash_sends_nothing_more(env: Env) -> None:
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    await env.run_for(HEARTBEAT_MS)
    env.network.kill("broker-0")
    await env.drive(node.crash())
    heartbeats = len(env.controller.heartbeats)
    await env.run_for(3 * HEARTBEAT_MS)
    assert len(env.controller.heartbeats) == heartbeats
    assert env.controller.shutdowns == []


# -- forwarding -----------------------------------------------------------------------------------


def test_lifecycle_config_reads_kafka_property_names() -> None:
    assert BrokerLifecycleConfig.from_properties({}) == BrokerLifecycleConfig(
        cluster_id="",
        broker_heartbeat_interval_ms=2_000,
        broker_session_timeout_ms=9_000,
        controlled_shutdown_enable=True,
        controlled_shutdown_max_retries=3,
        controlled_shutdown_retry_backoff_ms=5_000,
    )
    config = BrokerLifecycleConfig.from_properties(
        {
            "cluster.id": "prod",
            "broker.heartbeat.interval.ms": "250",
            "broker.session.timeout.ms": 1_000,
            "controlled.shutdown.enable": "False",
            "controlled.shutdown.max.retries": 5,
            "controlled.shutdown.retry.backoff.ms": 10,
        }
    )
    assert config == BrokerLifecycleConfig("prod", 250, 1_000, False, 5, 10)
    assert config.resend_backoff.max_ms == 500
    for bad in (
        {"broker.heartbeat.interval.ms": 0},
        {"controlled.shutdown.enable": "yes"},
        {"controlled.shutdown.max.retries": -1},
        {"controlled.shutdown.retry.backoff.ms": "soon"},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            BrokerLifecycleConfig.from_properties(bad)
    broker = BrokerConfig.from_properties({"broker.id": 1, "controlled.shutdown.max.retries": 7})
    assert broker.lifecycle.controlled_shutdown_max_retries == 7
