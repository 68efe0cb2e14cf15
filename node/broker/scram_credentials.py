"""SCRAM credentials on a broker: DescribeUserScramCredentials (50), AlterUserScramCredentials
(51), and the broker's copy of the controller's credentials that the Kafka listener's SASL
authenticates against.

* The controller sends every credential (salt, StoredKey, ServerKey, iterations; never a
  password) in an UpdateMetadata when they change and when the broker registers;
  `observe_update_metadata` wraps the UpdateMetadata handler and replaces the broker's
  `ScramCredentialCache` (runtime/net/sasl.py) with them once the update is accepted.
* DescribeUserScramCredentials is answered from that copy, as Kafka's brokers answer it from
  their metadata: each user's mechanisms and iterations only. `users` null lists every user; a
  named user without credentials is RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE
  (Kafka's messages).
* AlterUserScramCredentials is forwarded to the controller (node/broker/forwarder.py), unless the
  client's connection could expose it: an upsertion carries a salt and a salted password, which
  is as good as the password for logging in with SCRAM, so it must not cross a network in the
  clear. It is refused POLICY_VIOLATION (per user, with a message saying why) when it arrives on
  a listener without TLS from a peer that is not on this host (loopback): the request is
  well-formed, it is the server's policy that refuses it (INVALID_REQUEST would tell the client
  its bytes were wrong; Kafka has no code of its own for this). From loopback the salted password
  never leaves the host, so a local `ketch user create` works on a cluster without TLS.

`kafka_sasl` turns the broker's SASL settings into the Kafka listener's
(runtime/net/kafka_dialect.py) and logs the start-up warnings (PLAIN without TLS).

Ownership: the cache is mutated only by the UpdateMetadata handler on the broker's event loop;
the handlers are stateless otherwise.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Collection

from node.broker.config import KAFKA_LISTENER
from node.broker.forwarder import ControllerForwarder
from runtime.net.dialect import Handler, RequestContext
from runtime.net.kafka_dialect import KafkaSasl
from runtime.net.sasl import ScramCredentialCache, ScramCredentialSource
from runtime.net.sasl_config import PLAIN, SaslConfig
from runtime.net.scram import MECHANISMS_BY_TYPE, ScramCredential
from wire.errors import ErrorCode
from wire.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    ApiKey,
    CredentialInfo,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
    Request,
    Response,
    UpdateMetadataRequest,
    UpdateMetadataScramCredential,
)

log = logging.getLogger(__name__)

NEEDS_TLS = (
    "AlterUserScramCredentials carries salted passwords: send it over a TLS listener "
    "(SSL or SASL_SSL) or from the broker's own host"
)


def is_loopback(peer: str) -> bool:
    """Whether a peer name (`127.0.0.1:5555`, `[::1]:5555`) is this host's loopback address."""
    host, sep, port = peer.rpartition(":")
    if not sep or not port.isdigit():
        host = peer
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def credentials_of(
    entries: Collection[UpdateMetadataScramCredential],
) -> dict[tuple[str, str], ScramCredential]:
    """UpdateMetadata's entries by (user, mechanism name); an unknown mechanism is skipped."""
    credentials = {}
    for e in entries:
        mechanism = MECHANISMS_BY_TYPE.get(e.mechanism)
        if mechanism is not None:
            credentials[(e.name, mechanism.name)] = ScramCredential(
                e.salt, e.stored_key, e.server_key, e.iterations
            )
    return credentials


class BrokerScramCredentials:
    """The SCRAM APIs' handlers and the UpdateMetadata observer (module docstring).
    `tls_listeners`: the names of the broker's listeners that are TLS-wrapped."""

    def __init__(
        self,
        cache: ScramCredentialCache,
        forwarder: ControllerForwarder,
        tls_listeners: Collection[str],
    ) -> None:
        self.cache = cache
        self._forwarder = forwarder
        self._tls_listeners = frozenset(tls_listeners)

    def table(self) -> dict[int, Handler]:
        return {
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter,
        }

    def observe_update_metadata(self, handler: Handler) -> Handler:
        async def handle(request: Request, ctx: RequestContext) -> Response | None:
            answer: Response | None = await handler(request, ctx)
            assert isinstance(request, UpdateMetadataRequest), request
            accepted = answer is not None and answer.error_code == ErrorCode.NONE
            if accepted and request.scram_credentials is not None:
                self.cache.replace(credentials_of(request.scram_credentials))
            return answer

        return handle

    async def alter(
        self, request: AlterUserScramCredentialsRequest, ctx: RequestContext
    ) -> AlterUserScramCredentialsResponse:
        if request.upsertions and not self.may_carry_secrets(ctx):
            users = dict.fromkeys(
                [d.name for d in request.deletions] + [u.name for u in request.upsertions]
            )
            return AlterUserScramCredentialsResponse(
                results=[
                    AlterUserScramCredentialsResult(
                        user=user, error_code=ErrorCode.POLICY_VIOLATION, error_message=NEEDS_TLS
                    )
                    for user in users
                ]
            )
        return await self._forwarder.alter_user_scram_credentials(request)

    def may_carry_secrets(self, ctx: RequestContext) -> bool:
        # Loopback: the salted password never leaves the host (see the module docstring).
        return ctx.listener in self._tls_listeners or is_loopback(ctx.peer)

    async def describe(
        self, request: DescribeUserScramCredentialsRequest, ctx: RequestContext
    ) -> DescribeUserScramCredentialsResponse:
        return DescribeUserScramCredentialsResponse(results=describe(self.cache, request))


def describe(
    cache: ScramCredentialCache, request: DescribeUserScramCredentialsRequest
) -> list[DescribeUserScramCredentialsResult]:
    by_user: dict[str, list[CredentialInfo]] = {}
    for (user, name), cred in sorted(cache.items()):
        mechanism = next(m for m in MECHANISMS_BY_TYPE.values() if m.name == name)
        by_user.setdefault(user, []).append(
            CredentialInfo(mechanism=mechanism.type_code, iterations=cred.iterations)
        )
    if request.users is None:
        return [
            DescribeUserScramCredentialsResult(user=user, credential_infos=infos)
            for user, infos in sorted(by_user.items())
        ]
    names = [u.name for u in request.users]
    results = []
    for user in dict.fromkeys(names):
        if names.count(user) > 1:
            results.append(
                DescribeUserScramCredentialsResult(
                    user=user,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message=(
                        "Cannot describe SCRAM credentials for the same user twice in a single "
                        f"request: {user}"
                    ),
                )
            )
        elif user not in by_user:
            results.append(
                DescribeUserScramCredentialsResult(
                    user=user,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=(
                        f"Attempt to describe a user credential that does not exist: {user}"
                    ),
                )
            )
        else:
            infos = by_user[user]
            results.append(DescribeUserScramCredentialsResult(user=user, credential_infos=infos))
    return results


def kafka_sasl(config: SaslConfig, credentials: ScramCredentialSource) -> KafkaSasl | None:
    """The Kafka listener's SASL settings when its protocol is SASL_PLAINTEXT / SASL_SSL, else
    None. Warns, as Kafka's docs do, when PLAIN's passwords would cross the wire in the clear."""
    if not config.enabled:
        return None
    mechanisms = config.enabled_mechanisms
    if PLAIN in mechanisms and not config.protocol.uses_tls:
        log.warning(
            "SASL mechanism PLAIN is enabled on the %s listener without TLS (%s): passwords "
            "cross the network in the clear; use SASL_SSL, or SCRAM",
            KAFKA_LISTENER,
            config.protocol.value,
        )
    if PLAIN in mechanisms and not config.plain_users:
        log.warning("SASL mechanism PLAIN is enabled but its JAAS config names no user_NAME")
    return KafkaSasl(
        mechanisms=mechanisms,
        plain_users=config.plain_users,
        scram_credentials=credentials,
        max_receive_size=config.sasl_server_max_receive_size,
    )
