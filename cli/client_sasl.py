"""How a client command of `ketch` logs in as a user: the SASL properties of `--command-config
FILE` (Kafka's client names, client/sasl.py), beside its TLS ones (cli/client_tls.py).

    ketch produce orders --bootstrap broker:9092 --command-config alice.properties

    # alice.properties
    security.protocol=SASL_PLAINTEXT        # SASL_SSL: also the ssl.* of cli/client_tls.py
    sasl.mechanism=SCRAM-SHA-256            # or SCRAM-SHA-512, PLAIN
    sasl.username=alice
    sasl.password=alice-secret
    # or, as a Java client's file:
    # sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
    #     username="alice" password="alice-secret";

The native listener must be SASL_PLAINTEXT or SASL_SSL in the brokers'
listener.security.protocol.map for a login to be accepted (runtime/net/native_sasl.py). Without
the flag, or with PLAINTEXT / SSL, the command's client does not log in (User:ANONYMOUS).
Commands that hold the cluster secret (`ketch acl`) prove the cluster credential instead.

`set_command` (cli/common.py) resolves the login once per command, after parsing, and holds it
in a context variable for the command's run; `open_client` takes its authenticator from
`client_authenticator()`. One command per process or per `run_argv` call: the variable is reset
when the command returns.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from pathlib import Path

from cli.client_tls import read_properties_file
from client.connection import Authenticator
from client.sasl import SaslClientConfig, sasl_authenticator

_CLIENT_SASL: contextvars.ContextVar[SaslClientConfig | None] = contextvars.ContextVar(
    "ketch_client_sasl", default=None
)


def command_sasl(command_config: Path | None) -> SaslClientConfig | None:
    """The user a command's client logs in as (module docstring); ValueError naming the file
    and the property at fault."""
    if command_config is None:
        return None
    properties = read_properties_file(command_config)
    try:
        return SaslClientConfig.from_properties(properties)
    except ValueError as exc:
        raise ValueError(f"{command_config}: {exc}") from None


@contextlib.contextmanager
def client_sasl_scope(config: SaslClientConfig | None) -> Iterator[None]:
    """`config` as the running command's login until the block ends."""
    token = _CLIENT_SASL.set(config)
    try:
        yield
    finally:
        _CLIENT_SASL.reset(token)


def client_authenticator() -> Authenticator | None:
    """The login of the running command's clients, if its scope set one."""
    config = _CLIENT_SASL.get()
    return None if config is None else sasl_authenticator(config)
