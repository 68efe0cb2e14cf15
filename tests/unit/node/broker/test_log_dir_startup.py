"""A broker with a log dir that fails at startup (Kafka's loadLogs): it starts with the dirs that
load, registers with every dir it could identify, and its first heartbeat reports the failed dir
offline, so the controller moves that dir's replicas (actors/controller/replica_failure.py).
With no dir left it does not start, and says why. Simulated time, the fake controller of
fake_controller.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogManagerConfig
from runtime.log.manager import LogDirOfflineError, LogManager
from tests.unit.node.broker.fake_controller import Env, registered
from wire.topic import TopicPartition

TP = TopicPartition("orders", 0)


def prepare_dirs(dirs: list[Path]) -> tuple[bytes, ...]:
    """Broker 0's dirs after a clean shutdown, TP's log in the first; returns their ids."""
    manager = LogManager(
        LogManagerConfig(log_dirs=tuple(str(d) for d in dirs)),
        ManualClock(),
        node_id=0,
        cluster_id="test-cluster",
    )
    manager.open()
    manager.get_or_create_log(TP)
    ids = manager.directory_ids()
    manager.shutdown()
    return ids


def break_log(log_dir: Path) -> None:
    """TP's segment file is a directory: opening the log raises an OSError (EISDIR)."""
    segment = log_dir / TP.dir_name / ("0" * 20 + ".log")
    segment.unlink()
    segment.mkdir()


async def test_a_dir_failing_at_startup_is_reported_offline_and_the_broker_serves(
    env: Env,
) -> None:
    failing, good = env.tmp_path / "broker-0", env.tmp_path / "broker-0.1"
    failing_id, good_id = prepare_dirs([failing, good])
    break_log(failing)
    node = env.node({"log.dirs": f"{failing},{good}"})
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    await env.run_until(
        lambda: bool(env.controller.heartbeat_requests), max_ms=10, what="first heartbeat"
    )

    (_, registration) = env.controller.registrations[0]
    # Both dirs: the failed one is offline, not gone (a registration without it would tell
    # the controller its replicas were wiped).
    assert registration.log_dirs == [failing_id, good_id]
    assert env.controller.heartbeat_requests[0].offline_log_dirs == [failing_id]
    assert node.log_manager.live_log_dirs == (good.resolve(),)
    assert await env.metadata_answered()
    assert not node.failed.is_set()
    await env.drive(node.stop())


async def test_a_broker_without_a_loadable_dir_does_not_start(env: Env) -> None:
    only = env.tmp_path / "broker-0"
    prepare_dirs([only])
    break_log(only)
    node = env.node()
    with pytest.raises(LogDirOfflineError, match="no log dir could be opened"):
        await env.drive(node.start())
    assert env.controller.registrations == []
