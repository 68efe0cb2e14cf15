"""`meta.properties`: a log directory's identity, in Kafka's file format (KIP-858's v1).

Every log dir a broker uses holds one, written when the broker first takes the dir:

    #
    #Tue Nov 24 21:00:00 UTC 2026
    version=1
    node.id=0
    directory.id=7Sdu0aXiTKm9mKwXLxs5Ww
    cluster.id=...          (only once the broker knows one)

`directory.id` is a random 16-byte id in Kafka's text form (URL-safe base64, no padding), never
all zeros. It names this copy of the directory's data: a directory that is emptied or replaced
(a wiped disk, a new volume) gets a new id the next time a broker opens it, so the controller can
tell a broker that restarted on its old data from one that came back without it (the broker sends
its directory ids when it registers). `node.id` binds the dir to one broker: a dir written by
another broker id is refused, as Kafka refuses it (InconsistentBrokerIdException), and so is a
dir of another cluster.

Kafka reads `broker.id` for a v0 file; ketch writes v1 and reads either. Keys it does not know are
kept when the file is rewritten. Pure file format plus one atomic write; no state.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.log.checkpoints import fsync_dir
from runtime.log.errors import LogDirError
from wire.topic import parse_uuid_text, uuid_text

META_PROPERTIES_FILE: Final = "meta.properties"
VERSION: Final = "1"
DIRECTORY_ID_BYTES: Final = 16
_ZERO_ID: Final = bytes(DIRECTORY_ID_BYTES)

NewDirectoryId = Callable[[], bytes]


def random_directory_id() -> bytes:
    """A fresh directory id (uuid4 bytes: 122 random bits, so never all zeros)."""
    return uuid.uuid4().bytes


def directory_id_text(directory_id: bytes) -> str:
    return uuid_text(directory_id)


def parse_directory_id(text: str) -> bytes:
    raw = parse_uuid_text(text)  # ValueError names what is wrong
    if raw == _ZERO_ID:
        raise ValueError(f"directory.id {text!r} is not a 16-byte non-zero id")
    return raw


@dataclass(frozen=True, slots=True)
class MetaProperties:
    node_id: int
    directory_id: bytes
    cluster_id: str | None = None
    # Keys this version does not read, kept as they were when the file is rewritten.
    other: tuple[tuple[str, str], ...] = ()

    def render(self, now_s: float) -> str:
        lines = ["#", "#" + time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(now_s))]
        entries = {
            "version": VERSION,
            "node.id": str(self.node_id),
            "directory.id": directory_id_text(self.directory_id),
            **({"cluster.id": self.cluster_id} if self.cluster_id else {}),
            **dict(self.other),
        }
        lines += [f"{key}={value}" for key, value in entries.items()]
        return "\n".join(lines) + "\n"


def parse(text: str, *, source: str) -> MetaProperties:
    """The properties of a meta.properties file; LogDirError naming `source` when unusable."""
    entries: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise LogDirError(f"{source}: line {line!r} is not key=value")
        entries[key.strip()] = value.strip()
    version = entries.pop("version", None)
    if version not in ("0", "1"):
        raise LogDirError(f"{source}: unsupported version {version!r}")
    node = entries.pop("node.id", None) or entries.pop("broker.id", None)
    if node is None or not node.lstrip("-").isdigit():
        raise LogDirError(f"{source}: no node.id (or broker.id)")
    directory = entries.pop("directory.id", None)
    if directory is None:
        raise LogDirError(f"{source}: no directory.id")
    try:
        directory_id = parse_directory_id(directory)
    except ValueError as exc:
        raise LogDirError(f"{source}: {exc}") from None
    cluster_id = entries.pop("cluster.id", None) or None
    return MetaProperties(int(node), directory_id, cluster_id, tuple(sorted(entries.items())))


def ensure(
    directory: Path,
    *,
    node_id: int,
    cluster_id: str | None,
    wall_ms: int,
    new_directory_id: NewDirectoryId = random_directory_id,
) -> tuple[MetaProperties, bool]:
    """The dir's identity, and whether it was created now (the dir had none).

    A dir without the file gets a new directory id: it is new, was emptied, or was written by a
    ketch without directory ids (its data then has no identity to compare with, and is adopted).
    A file naming another node or another cluster is a LogDirError: the broker must not serve
    another broker's data. A known cluster id is added to a file that has none. `wall_ms` only
    dates the file's comment line.
    """
    path = directory / META_PROPERTIES_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        directory_id = new_directory_id()
        if len(directory_id) != DIRECTORY_ID_BYTES or directory_id == _ZERO_ID:
            raise ValueError("a directory id is 16 bytes and not all zeros") from None
        meta = MetaProperties(node_id, directory_id, cluster_id)
        _write(path, meta, wall_ms)
        return meta, True
    meta = parse(text, source=str(path))
    if meta.node_id != node_id:
        raise LogDirError(f"{path}: written by node {meta.node_id}, this is node {node_id}")
    if cluster_id and meta.cluster_id and meta.cluster_id != cluster_id:
        raise LogDirError(
            f"{path}: belongs to cluster {meta.cluster_id!r}, this broker to {cluster_id!r}"
        )
    if cluster_id and not meta.cluster_id:
        meta = MetaProperties(meta.node_id, meta.directory_id, cluster_id, meta.other)
        _write(path, meta, wall_ms)
    return meta, False


def read_if_present(directory: Path) -> MetaProperties | None:
    """The dir's identity without creating one (offline tools read dirs they do not own)."""
    path = directory / META_PROPERTIES_FILE
    try:
        return parse(path.read_text(encoding="utf-8"), source=str(path))
    except FileNotFoundError:
        return None


def _write(path: Path, meta: MetaProperties, wall_ms: int) -> None:
    """Write to a temporary file, fsync it, rename it over the old one, fsync the directory: a
    crash leaves the old file or the new one, never a torn one."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as out:
        out.write(meta.render(wall_ms / 1000))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fsync_dir(path.parent)
