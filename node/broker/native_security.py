"""The native listener's security: its SASL settings and its handler table under ACLs.

The native (inter-broker) listener gets the same identities and ACLs as the Kafka listener:

* SASL. When listener.security.protocol.map maps the native listener to SASL_PLAINTEXT or
  SASL_SSL, `native_sasl` gives its dialect the Kafka listener's mechanisms, PLAIN users and SCRAM
  credentials (sasl.enabled.mechanisms, sasl.jaas.config, the controller's SCRAM credentials
  from UpdateMetadata), so a user logs in with the same password on either listener
  (runtime/net/native_sasl.py has the per-connection states). The cluster credential stays on
  the listener for brokers, the controller and admin tools holding the cluster secret.
* ACLs. `native_handlers` wraps the table as the Kafka listener's is (node/broker/
  authorization.py), so a `ketch` command logged in as a user gets the answers a Kafka client
  with the same principal gets. A cluster member is a super user, as there. One rule the Kafka
  listener does not need: a follower's Fetch (replica_id >= 0, which the Kafka listener refuses
  outright) from a connection that is not a cluster member needs CLUSTER_ACTION on the cluster,
  else every partition is TOPIC_AUTHORIZATION_FAILED (Kafka's rule for a follower fetch), so a
  user cannot read past the high watermark by posing as a replica. Control-plane APIs stay for
  cluster members only (runtime/net/native_dialect.py refuses them before any handler).
* `fetcher_credential`: with either of the above, a broker's fetchers prove the cluster
  credential to the leader (they are then cluster members); without, they stay anonymous, as
  before, so a plain cluster pays no exchange per fetcher connection.

Stateless: functions over the broker's config and its `Authorization`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from actors.acl.bindings import AclOperation
from node.broker.authorization import Authorization
from runtime.net.dialect import Handler, RequestContext
from runtime.net.native_sasl import NativeSasl
from runtime.net.sasl import ScramCredentialSource
from runtime.net.sasl_config import PLAIN, SaslConfig
from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.messages import ApiKey, FetchRequest, Response

log = logging.getLogger(__name__)


def native_sasl(config: SaslConfig, credentials: ScramCredentialSource) -> NativeSasl | None:
    """The native listener's user mechanisms when its protocol is SASL_*, else None. Warns when
    PLAIN's passwords would cross the wire in the clear."""
    if not config.enabled:
        return None
    mechanisms = config.enabled_mechanisms
    if PLAIN in mechanisms and not config.protocol.uses_tls:
        log.warning(
            "SASL mechanism PLAIN is enabled on the native listener without TLS (%s): "
            "passwords cross the network in the clear; use SASL_SSL, or SCRAM",
            config.protocol.value,
        )
    return NativeSasl(
        mechanisms=mechanisms,
        plain_users=config.plain_users,
        scram_credentials=credentials,
        max_receive_size=config.sasl_server_max_receive_size,
    )


def fetcher_credential(native: SaslConfig, authorization: Authorization) -> bool:
    """Whether fetchers must prove the cluster credential to reach a leader's native listener."""
    return native.enabled or authorization.authorizer.enabled


def native_handlers(
    authorization: Authorization, handlers: Mapping[int, Handler]
) -> dict[int, Handler]:
    """The native listener's table: `handlers` under the ACL guards (module docstring); the
    table unchanged (a copy) without an authorizer."""
    if not authorization.authorizer.enabled:
        return dict(handlers)
    guarded = authorization.wrap(handlers)
    fetch = guarded.get(ApiKey.FETCH)
    if fetch is not None:
        guarded[ApiKey.FETCH] = _follower_fetch(authorization, fetch)
    return guarded


def _follower_fetch(authorization: Authorization, handler: Handler) -> Handler:
    async def handle(request: FetchRequest, ctx: RequestContext) -> Response | None:
        if request.replica_id >= 0 and not authorization.on_cluster(
            ctx, AclOperation.CLUSTER_ACTION
        ):
            return error_response(request, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        answer: Response | None = await handler(request, ctx)
        return answer

    return handle
