"""The cluster id of a broker's log dirs (LogManager.cluster_id / store_cluster_id): cluster.id
when configured, else the one the dirs' meta.properties name, else the one the controller tells
the broker, then written into every live dir; dirs of two clusters are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogManagerConfig
from runtime.log.errors import LogDirError
from runtime.log.manager import LogManager
from runtime.log.meta_properties import ensure, read_if_present


def manager(dirs: list[Path], cluster_id: str | None = None) -> LogManager:
    return LogManager(
        LogManagerConfig(log_dirs=tuple(str(d) for d in dirs)),
        ManualClock(),
        node_id=0,
        cluster_id=cluster_id,
    )


def identified(directory: Path, cluster_id: str) -> None:
    """A dir broker 0 used before, in cluster `cluster_id`."""
    directory.mkdir()
    ensure(directory, node_id=0, cluster_id=cluster_id, wall_ms=0)


def stored(directory: Path) -> str | None:
    meta = read_if_present(directory)
    assert meta is not None, directory
    return meta.cluster_id


def test_new_dirs_learn_the_cluster_id_and_keep_it(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    first = manager(dirs)
    first.open()
    assert [stored(d) for d in dirs] == [None, None]
    ids = first.directory_ids()
    first.store_cluster_id("c-1")
    assert first.cluster_id == "c-1"
    assert [stored(d) for d in dirs] == ["c-1", "c-1"]
    first.store_cluster_id("c-1")  # told again: nothing changes
    with pytest.raises(LogDirError, match="belong to cluster c-1, not c-2"):
        first.store_cluster_id("c-2")
    assert [stored(d) for d in dirs] == ["c-1", "c-1"]
    first.shutdown()

    again = manager(dirs)
    again.open()
    assert again.cluster_id == "c-1", "read back from meta.properties"
    assert again.directory_ids() == ids, "the dirs' identities did not change"
    again.shutdown()


def test_a_dir_without_the_id_adopts_the_others(tmp_path: Path) -> None:
    """A dir added to log.dirs later has no cluster id; the other dir's decides, and the one
    the controller confirms is written into the new dir too."""
    old, new = tmp_path / "old", tmp_path / "new"
    identified(old, "c-1")
    logs = manager([new, old])
    logs.open()
    assert logs.cluster_id == "c-1"
    assert stored(new) is None
    logs.store_cluster_id("c-1")
    assert stored(new) == "c-1"
    logs.shutdown()


def test_dirs_of_two_clusters_are_refused(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    identified(one, "c-1")
    identified(two, "c-2")
    with pytest.raises(LogDirError, match="belongs to cluster 'c-2'"):
        manager([one, two]).open()
    # cluster.id configured: a dir of another cluster is refused too.
    with pytest.raises(LogDirError, match="belongs to cluster 'c-1'"):
        manager([one], cluster_id="c-9").open()


def test_a_configured_cluster_id_is_known_before_open(tmp_path: Path) -> None:
    logs = manager([tmp_path / "a"], cluster_id="c-5")
    assert logs.cluster_id == "c-5"
    logs.open()
    assert stored(tmp_path / "a") == "c-5"
    logs.shutdown()
