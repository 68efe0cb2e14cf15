"""meta.properties: a log dir's identity (node, directory id, cluster), in Kafka's file format,
created once, kept across restarts, new for an emptied dir, and refused for another node."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogManagerConfig
from runtime.log.errors import LogDirError
from runtime.log.manager import LogManager
from runtime.log.meta_properties import (
    META_PROPERTIES_FILE,
    directory_id_text,
    ensure,
    parse,
    parse_directory_id,
    read_if_present,
)

WALL_MS = 1_700_000_000_000


def sequential_ids() -> Callable[[], bytes]:
    """Directory ids 1, 2, ... (deterministic, unlike uuid4)."""
    counter = itertools.count(1)
    return lambda: next(counter).to_bytes(16, "big")


def test_a_new_dir_gets_an_identity_that_survives_a_restart(tmp_path: Path) -> None:
    meta, created = ensure(tmp_path, node_id=3, cluster_id=None, wall_ms=WALL_MS)
    assert created
    text = (tmp_path / META_PROPERTIES_FILE).read_text()
    assert "version=1\n" in text
    assert "node.id=3\n" in text
    assert f"directory.id={directory_id_text(meta.directory_id)}\n" in text
    again, created_again = ensure(tmp_path, node_id=3, cluster_id=None, wall_ms=WALL_MS + 5)
    assert (again.directory_id, created_again) == (meta.directory_id, False)
    assert read_if_present(tmp_path) == again


def test_an_emptied_dir_gets_a_new_identity(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    directory.mkdir()
    first, _ = ensure(directory, node_id=0, cluster_id=None, wall_ms=WALL_MS)
    shutil.rmtree(directory)
    directory.mkdir()
    second, created = ensure(directory, node_id=0, cluster_id=None, wall_ms=WALL_MS)
    assert created
    assert second.directory_id != first.directory_id


def test_another_nodes_or_clusters_dir_is_refused(tmp_path: Path) -> None:
    ensure(tmp_path, node_id=1, cluster_id="c1", wall_ms=WALL_MS)
    with pytest.raises(LogDirError, match="written by node 1, this is node 2"):
        ensure(tmp_path, node_id=2, cluster_id="c1", wall_ms=WALL_MS)
    with pytest.raises(LogDirError, match="belongs to cluster 'c1'"):
        ensure(tmp_path, node_id=1, cluster_id="c2", wall_ms=WALL_MS)


def test_a_cluster_id_learnt_later_is_added(tmp_path: Path) -> None:
    first, _ = ensure(tmp_path, node_id=1, cluster_id=None, wall_ms=WALL_MS)
    updated, created = ensure(tmp_path, node_id=1, cluster_id="c9", wall_ms=WALL_MS)
    assert not created
    assert (updated.directory_id, updated.cluster_id) == (first.directory_id, "c9")
    assert "cluster.id=c9\n" in (tmp_path / META_PROPERTIES_FILE).read_text()


def test_kafkas_v0_file_and_unknown_keys_are_read() -> None:
    text = "#\n#a date\nversion=0\nbroker.id=4\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAQ\nx.y=z\n"
    meta = parse(text, source="f")
    assert (meta.node_id, meta.directory_id, meta.other) == (
        4,
        bytes(15) + b"\x01",
        (("x.y", "z"),),
    )
    assert "x.y=z\n" in meta.render(WALL_MS / 1000)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("version=7\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAQ\n", "unsupported version"),
        ("version=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAQ\n", "no node.id"),
        ("version=1\nnode.id=1\n", "no directory.id"),
        ("version=1\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAA\n", "non-zero"),
        ("version=1\nnode.id=1\nno equals sign\n", "not key=value"),
    ],
)
def test_an_unusable_file_is_refused(text: str, why: str) -> None:
    with pytest.raises(LogDirError, match=why):
        parse(text, source="f")


def test_directory_ids_are_16_bytes() -> None:
    with pytest.raises(ValueError, match="16-byte"):
        parse_directory_id("AAAA")


def test_the_manager_identifies_its_dirs_and_readers_only_read(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    config = LogManagerConfig(log_dirs=tuple(str(d) for d in dirs))
    clock = ManualClock()
    reader = LogManager(config, clock)
    reader.open()
    assert reader.directory_ids() == ()
    reader.shutdown()
    assert not (dirs[0] / META_PROPERTIES_FILE).exists(), "a reader creates no identity"
    manager = LogManager(config, clock, node_id=0, new_directory_id=sequential_ids())
    loaded = manager.open()
    assert manager.directory_ids() == (
        (1).to_bytes(16, "big"),
        (2).to_bytes(16, "big"),
    )
    assert [d.directory_id for d in loaded] == list(manager.directory_ids())
    manager.shutdown()
    other = LogManager(config, clock, node_id=1)
    with pytest.raises(LogDirError, match="written by node 0"):
        other.open()
