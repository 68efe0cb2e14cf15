from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.log.checkpoints import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
)
from runtime.log.errors import CorruptCheckpointError
from runtime.log.partition_dir import delete_dir_name, is_delete_dir
from wire.topic import TopicPartition


def test_offset_checkpoint_kafka_text_layout(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    file = OffsetCheckpointFile(path)
    offsets = {TopicPartition("b-topic", 1): 99, TopicPartition("a.topic", 0): 1234}
    file.write(offsets)
    assert path.read_text() == "0\n2\na.topic 0 1234\nb-topic 1 99\n"
    assert file.read() == offsets


def test_missing_checkpoint_reads_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "none").read() == {}
    assert LeaderEpochCheckpointFile(tmp_path / "none").read() == []
    assert PartitionMetadataFile(tmp_path / "none").read() is None


@pytest.mark.parametrize(
    "text",
    [
        "1\n0\n",  # unknown version
        "0\n2\nt 0 5\n",  # fewer entries than announced
        "0\n1\nt 0\n",  # short line
        "0\n1\nt zero 5\n",  # not a number
        "0\n",  # no count
        "0\nx\n",
    ],
)
def test_malformed_offset_checkpoints_raise(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()


def test_leader_epoch_checkpoint_layout(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([EpochEntry(3, 0), EpochEntry(5, 880)])
    assert path.read_text() == "0\n2\n3 0\n5 880\n"
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(3, 0), EpochEntry(5, 880)]


def test_partition_metadata_layout(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    PartitionMetadataFile(path).write("s3fwXAGzTpWm2qi0kZ0c1w")
    assert path.read_text() == "version: 0\ntopic_id: s3fwXAGzTpWm2qi0kZ0c1w"
    assert PartitionMetadataFile(path).read() == "s3fwXAGzTpWm2qi0kZ0c1w"
    path.write_text("version: 1\ntopic_id: x")
    with pytest.raises(CorruptCheckpointError):
        PartitionMetadataFile(path).read()


def test_crash_before_rename_keeps_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    file = OffsetCheckpointFile(path)
    old = {TopicPartition("t", 0): 10}
    file.write(old)

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        file.write({TopicPartition("t", 0): 20, TopicPartition("t", 1): 5})
    monkeypatch.undo()
    assert file.read() == old
    # The leftover temp file is ignored, then overwritten by the next write.
    assert (tmp_path / "replication-offset-checkpoint.tmp").exists()
    file.write({TopicPartition("t", 0): 30})
    assert file.read() == {TopicPartition("t", 0): 30}


def test_torn_temp_file_never_replaces_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    file = OffsetCheckpointFile(path)
    file.write({TopicPartition("t", 0): 7})
    # A crash mid-write leaves half a temp file; the real file is untouched.
    (tmp_path / "log-start-offset-checkpoint.tmp").write_text("0\n3\nt 0")
    assert file.read() == {TopicPartition("t", 0): 7}
    assert sorted(os.listdir(tmp_path)) == [
        "log-start-offset-checkpoint",
        "log-start-offset-checkpoint.tmp",
    ]


def test_topic_partition_dir_names() -> None:
    tp = TopicPartition.from_dir_name("my-topic-12")
    assert tp == TopicPartition("my-topic", 12)
    assert tp.dir_name == "my-topic-12"
    assert is_delete_dir(delete_dir_name(tp))
    for bad in ["nopartition", "topic-", "topic-x", "topic-01", "-3"]:
        with pytest.raises(ValueError):  # noqa: PT011
            TopicPartition.from_dir_name(bad)
    with pytest.raises(ValueError):  # noqa: PT011
        TopicPartition("bad topic", 0)
