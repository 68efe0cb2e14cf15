"""How a client command of `ketch` secures its connections: Kafka's client properties from
`--command-config FILE` (the Kafka CLI tools' flag), else the TLS settings `ketch up --tls`
records in the cluster's cluster.json, else plaintext.

    ketch topic list --bootstrap broker:9092 --command-config client.properties

    # client.properties (Java properties syntax: key=value, # comments)
    security.protocol=SSL
    ssl.truststore.location=/etc/ketch/ca.pem
    ssl.keystore.location=/etc/ketch/client.pem     # only if the listener wants a client cert
    ssl.endpoint.identification.algorithm=https      # the default; empty turns it off

The properties are runtime/net/tls.py's (`client_ssl_context`, which reads SASL_SSL as TLS and
SASL_PLAINTEXT as none); the login of SASL_* is cli/client_sasl.py's. Without the flag, a command
whose bootstrap servers include a broker of the `ketch up` cluster in `<data-dir>/cluster.json`
(the command's `--data-dir`, else ./data) uses the client properties that file's `tls` entry
holds, so `ketch up --tls` needs no flag at all.

`set_command` (cli/common.py) resolves the context once per command, after parsing, and holds
it in a context variable for the command's run; `open_client` takes its transport from
`client_transport()`. One command per process or per `run_argv` call: the variable is reset
when the command returns.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import json
import ssl
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from runtime.net.tcp import TcpTransport
from runtime.net.tls import client_ssl_context
from runtime.net.transport import Address

COMMAND_CONFIG_FLAG: Final = "--command-config"
# The key of cluster.json holding the client properties of a `ketch up --tls` cluster.
CLUSTER_JSON_TLS_KEY: Final = "tls"
_DEFAULT_DATA_DIR: Final = Path("data")

_CLIENT_TLS: contextvars.ContextVar[ssl.SSLContext | None] = contextvars.ContextVar(
    "ketch_client_tls", default=None
)


def add_command_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        COMMAND_CONFIG_FLAG,
        type=Path,
        default=None,
        metavar="FILE",
        help=(
            "Kafka client properties (security.protocol=SSL|SASL_PLAINTEXT|SASL_SSL, "
            "ssl.truststore.location, ssl.keystore.location, "
            "ssl.endpoint.identification.algorithm, sasl.mechanism, sasl.username, "
            "sasl.password); default: the `ketch up` cluster's cluster.json, else plaintext"
        ),
    )


def read_properties_file(path: Path) -> dict[str, str]:
    """A Java properties file's `key=value` (or `key: value`) lines; `#` and `!` start comments.
    ValueError naming the file and line for anything else."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{COMMAND_CONFIG_FLAG}: cannot read {path}: {exc.strerror}") from None
    properties: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        positions = [i for i in (stripped.find("="), stripped.find(":")) if i > 0]
        if not positions:
            raise ValueError(f"{path}:{number}: expected key=value, got {stripped!r}")
        cut = min(positions)
        properties[stripped[:cut].strip()] = stripped[cut + 1 :].strip()
    return properties


def command_ssl_context(
    command_config: Path | None, bootstrap: Sequence[Address], data_dir: Path | None
) -> ssl.SSLContext | None:
    """The TLS context a command's client uses (module docstring); ValueError naming the file
    or property at fault."""
    if command_config is not None:
        properties = read_properties_file(command_config)
        try:
            return client_ssl_context(properties)
        except ValueError as exc:
            raise ValueError(f"{command_config}: {exc}") from None
    recorded = _cluster_json_tls(_DEFAULT_DATA_DIR if data_dir is None else data_dir, bootstrap)
    return None if recorded is None else client_ssl_context(recorded)


def _cluster_json_tls(data_dir: Path, bootstrap: Sequence[Address]) -> Mapping[str, str] | None:
    """cluster.json's client properties when it has some and lists a broker of `bootstrap`."""
    path = data_dir / "cluster.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        brokers = {Address(str(b["host"]), int(b["port"])) for b in document["brokers"]}
        recorded = document.get(CLUSTER_JSON_TLS_KEY)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no cluster there (cli/bootstrap.py reports a broken file when it reads it)
    if not isinstance(recorded, dict) or not brokers & set(bootstrap):
        return None
    return {str(k): str(v) for k, v in recorded.items()}


@contextlib.contextmanager
def client_tls_scope(context: ssl.SSLContext | None) -> Iterator[None]:
    """`context` as the running command's client TLS until the block ends."""
    token = _CLIENT_TLS.set(context)
    try:
        yield
    finally:
        _CLIENT_TLS.reset(token)


def client_transport() -> TcpTransport:
    """The transport of the running command's clients: TLS when its scope set a context."""
    return TcpTransport(ssl_client=_CLIENT_TLS.get())
