"""The Kafka listener's dialect: Kafka requests in, the broker's native handlers, Kafka answers out.

The server (runtime/net/server.py) keeps doing what it does for the native listener (framing,
per-connection ordering of responses, backpressure, idle timeouts, graceful stop); this dialect
only turns each frame into a `Call` on the same handlers the native listener uses, and their
native responses into Kafka responses of the version that was asked (`wire.kafka`).
Produce and Fetch, which carry every record, are decoded and encoded by hand
(wire/kafka/produce_codec.py, wire/kafka/fetch_codec.py: record sets stay views of the request
frame on the way in and of what the log read on the way out); every other API goes through kio.

What a request cannot become:

    ApiVersions of a version not served      v0-format UNSUPPORTED_VERSION answer (client retries)
    another API or version not served        connection closed (as Kafka does)
    header or body that cannot be decoded    connection closed
    a refused request (replica id on Fetch)  the API's own per-partition error answer
    handler failure                          UNKNOWN_SERVER_ERROR per partition (Kafka's way)

Fetch sessions (KIP-227): with a `FetchSessionCache` (runtime/net/fetch_session.py), a Fetch
that names a session is served in that session's context: `admit` turns an incremental request
into the session's full native request (or answers a session error at once) and `encode` keeps
only the partitions the session's client must be told of. Both run on the loop thread, the
cache's owner. Without a cache every Fetch is answered in full, with session id 0.

Kafka connections never prove the cluster credential here: no control-plane API is reachable
through this listener (none is in `wire.kafka.apis.APIS`), and `RequestContext.cluster_member`
is False. On a listener whose security protocol is SASL_PLAINTEXT or SASL_SSL (a `KafkaSasl`
given), each connection authenticates first (runtime/net/sasl.py has the states and mechanisms):
before that only ApiVersions, SaslHandshake v1 and SaslAuthenticate v0-2 are admitted, any
other request closes the connection (logged, as Kafka's IllegalSaslStateException), a frame
over sasl.server.max.receive.size closes it before its body is read (`max_frame_bytes`), and a
refused mechanism or failed authentication is answered and then closes it
(`CloseAfterAnswer`). SaslHandshake and SaslAuthenticate are answered synchronously in the
reader, so a request pipelined behind the last SaslAuthenticate already runs as the
authenticated principal (`RequestContext.principal`, `User:NAME`).
`KafkaProtocol` holds what the listener's connections share; each connection's `KafkaDialect`
knows its peer and its SASL state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.constants import EntityType

from runtime.net.dialect import Answer, Call, CloseAfterAnswer, Handler, RequestContext
from runtime.net.fetch_session import FetchContext, FetchSessionCache, error_answer
from runtime.net.sasl import (
    SaslEvent,
    SaslReply,
    SaslServerAuthenticator,
    ScramCredentialSource,
)
from runtime.net.security_protocol import ANONYMOUS_PRINCIPAL
from runtime.net.server import Server
from runtime.net.transport import Stream
from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.kafka.apis import API_VERSIONS_RANGE, APIS, FetchByIds, KafkaApi, TopicIds
from wire.kafka.codec import (
    KafkaFrameError,
    RequestPrefix,
    decode_request,
    encode_response,
    read_prefix,
    schema,
    unsupported_api_versions,
)
from wire.kafka.convert import to_kio
from wire.kafka.fetch_codec import SESSIONLESS, decode_fetch, encode_fetch_response
from wire.kafka.produce_codec import decode_produce_request, encode_produce_response
from wire.messages import (
    ApiKey,
    ApiVersionsResponse,
    ApiVersionsResponseKey,
    FetchResponse,
    ProduceResponse,
    Request,
    Response,
)

_log = logging.getLogger(__name__)

# The SASL APIs a SASL listener serves and advertises: SaslHandshake v1 only (v0's unframed
# tokens are refused, see runtime/net/sasl.py), SaslAuthenticate v0-2.
SASL_HANDSHAKE_RANGE: Final = (1, 1)
SASL_AUTHENTICATE_RANGE: Final = (0, 2)
_SASL_EVENTS: Final = {
    int(ApiKey.API_VERSIONS): SaslEvent.API_VERSIONS,
    int(ApiKey.SASL_HANDSHAKE): SaslEvent.HANDSHAKE,
    int(ApiKey.SASL_AUTHENTICATE): SaslEvent.AUTHENTICATE,
}
_SASL_API_KEYS: Final = frozenset({int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)})


@dataclass(frozen=True, slots=True)
class KafkaSasl:
    """A SASL listener's settings: the enabled mechanisms, PLAIN's users, where SCRAM
    credentials come from, and the largest frame before authentication."""

    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    scram_credentials: ScramCredentialSource
    max_receive_size: int


class KafkaProtocol:
    """What every Kafka connection of one listener shares: the handlers (by API key, native
    requests and responses), the broker's topic ids, and the APIs served with them."""

    def __init__(
        self,
        handlers: Mapping[int, Handler],
        topics: TopicIds,
        fetch_sessions: FetchSessionCache | None = None,
        sasl: KafkaSasl | None = None,
    ) -> None:
        self.handlers = dict(handlers)
        self.topics = topics
        self.fetch_sessions = fetch_sessions
        self.sasl = sasl
        self.apis = {key: api for key, api in APIS.items() if self._servable(api)}

    def _servable(self, api: KafkaApi) -> bool:
        return api.native is None or api.key in self.handlers

    def dialect(self, server: Server, stream: Stream) -> KafkaDialect:
        """The `DialectFactory` for `Server(dialect=...)`."""
        return KafkaDialect(self, stream.peer, server.listener, stream.tls_principal)


class KafkaDialect:
    """One Kafka connection: its peer, its listener, and (on a SASL listener) its SASL state."""

    def __init__(
        self, protocol: KafkaProtocol, peer: str, listener: str, tls_principal: str | None = None
    ) -> None:
        self.protocol = protocol
        self.peer = peer
        self.listener = listener
        # Kafka's principal: a SASL login's user (set below once it succeeds), else the subject
        # of the TLS client certificate (SSL with ssl.client.auth), else ANONYMOUS.
        self.principal = tls_principal or ANONYMOUS_PRINCIPAL
        self._logged_in = False
        sasl = protocol.sasl
        self.sasl = (
            None
            if sasl is None
            else SaslServerAuthenticator(
                sasl.mechanisms, sasl.plain_users, sasl.scram_credentials, peer=peer
            )
        )

    def max_frame_bytes(self) -> int | None:
        """sasl.server.max.receive.size until the connection has authenticated."""
        sasl = self.protocol.sasl
        if sasl is None or self.sasl is None or self.sasl.authenticated:
            return None
        return sasl.max_receive_size

    # -- admitting a frame ------------------------------------------------------------------------

    def admit(self, frame: memoryview) -> Answer | Call:
        prefix = read_prefix(frame)
        sasl = self.sasl
        if sasl is not None and (not sasl.authenticated or prefix.api_key in _SASL_API_KEYS):
            return self._admit_sasl(frame, prefix, sasl)
        return self._admit(frame, prefix)

    def _admit_sasl(
        self, frame: memoryview, prefix: RequestPrefix, sasl: SaslServerAuthenticator
    ) -> Answer | Call:
        event = _SASL_EVENTS.get(prefix.api_key, SaslEvent.REQUEST)
        if event is SaslEvent.HANDSHAKE or event is SaslEvent.AUTHENTICATE:
            return self._sasl_exchange(frame, prefix, sasl, event)
        if not sasl.accepts(event):
            raise KafkaFrameError(
                f"Unexpected Kafka request of type {prefix.api_key} "
                f"(v{prefix.api_version}) during SASL authentication"
            )
        return self._admit(frame, prefix)

    def _sasl_exchange(
        self,
        frame: memoryview,
        prefix: RequestPrefix,
        sasl: SaslServerAuthenticator,
        event: SaslEvent,
    ) -> Answer:
        low, high = (
            SASL_HANDSHAKE_RANGE if event is SaslEvent.HANDSHAKE else SASL_AUTHENTICATE_RANGE
        )
        if not low <= prefix.api_version <= high:
            raise KafkaFrameError(
                f"{event.value} v{prefix.api_version} is not supported on the Kafka listener "
                f"(v{low}-{high}; SaslHandshake v0's unframed tokens are not)"
            )
        body = decode_request(frame, prefix).body
        response_cls = schema(prefix.api_key, prefix.api_version, EntityType.response)
        if event is SaslEvent.HANDSHAKE:
            reply = sasl.handshake(body.mechanism)
            response = response_cls(
                error_code=KioErrorCode(reply.error), mechanisms=tuple(sasl.mechanisms)
            )
        else:
            reply = sasl.authenticate(body.auth_bytes)
            response = response_cls(
                error_code=KioErrorCode(reply.error),
                error_message=reply.message,
                auth_bytes=reply.auth_bytes,
            )
        answer = encode_response(prefix.correlation_id, response)
        if sasl.authenticated and not self._logged_in:
            self._logged_in = True
            self.principal = sasl.principal or ANONYMOUS_PRINCIPAL
            _log.debug("%s authenticated as %s", self.peer, self.principal)
        return self._closing(answer, reply, event) if reply.close else answer

    def _closing(self, answer: Answer, reply: SaslReply, event: SaslEvent) -> Answer:
        if reply.error is ErrorCode.ILLEGAL_SASL_STATE:
            # Out of order: Kafka closes without an answer (IllegalSaslStateException).
            raise KafkaFrameError(f"unexpected {event.value} during SASL authentication")
        raise CloseAfterAnswer(answer, f"{event.value}: {reply.error.name}: {reply.message}")

    def _admit(self, frame: memoryview, prefix: RequestPrefix) -> Answer | Call:
        protocol = self.protocol
        api = protocol.apis.get(prefix.api_key)
        if prefix.api_key == ApiKey.API_VERSIONS and not (api and api.serves(prefix.api_version)):
            return unsupported_api_versions(prefix.correlation_id, *API_VERSIONS_RANGE)
        if api is None or not api.serves(prefix.api_version):
            raise KafkaFrameError(
                f"API {prefix.api_key} v{prefix.api_version} is not served on the Kafka listener"
            )
        response_cls = schema(prefix.api_key, prefix.api_version, EntityType.response)
        native: Request
        note: object = None
        fetch: FetchContext | None = None
        if api.key == ApiKey.PRODUCE:
            client_id, native = decode_produce_request(frame, prefix)
        elif api.key == ApiKey.FETCH:
            client_id, fetch_request, note, session = decode_fetch(frame, prefix, protocol.topics)
            native = fetch_request
            sessions = protocol.fetch_sessions
            # A refused Fetch (below) is answered outside any session; a sessionless one (most
            # clients' every fetch) is not checked for that twice.
            if (
                sessions is not None
                and session is not SESSIONLESS
                and (api.refuse is None or api.refuse(native) is None)
            ):
                context = sessions.new_context(
                    fetch_request, session.session_id, session.session_epoch, session.forgotten
                )
                if not isinstance(context, FetchContext):
                    answer = error_answer(context)
                    return encode_fetch_response(
                        prefix.correlation_id, prefix.api_version, answer, None, protocol.topics
                    )
                fetch = context
                native = context.request
        else:
            request = decode_request(frame, prefix)
            if api.key == ApiKey.API_VERSIONS:
                return encode_response(request.correlation_id, self.api_versions(response_cls))
            client_id = request.client_id
            try:
                native, note = api.native_request(request.body, prefix.api_version, protocol.topics)
            except (TypeError, ValueError) as exc:
                # A value kio accepts but the native message cannot hold (out of its range).
                raise KafkaFrameError(f"API {api.key} v{prefix.api_version}: {exc}") from None
        origin = _Origin(api, response_cls, note, fetch)
        call = Call(protocol.handlers[api.key], native, self._context(prefix, client_id), origin)
        if api.refuse is not None and (code := api.refuse(native)) is not None:
            return self.error(call, code)
        return call

    def _context(self, prefix: RequestPrefix, client_id: str | None) -> RequestContext:
        return RequestContext(
            peer=self.peer,
            client_id=client_id,
            api_key=prefix.api_key,
            api_version=prefix.api_version,
            correlation_id=prefix.correlation_id,
            cluster_member=False,
            listener=self.listener,
            principal=self.principal,
        )

    def api_versions(self, response_cls: type[Any]) -> Any:
        ranges = {int(api.key): (api.low, api.high) for api in self.protocol.apis.values()}
        if self.sasl is not None:
            ranges[int(ApiKey.SASL_HANDSHAKE)] = SASL_HANDSHAKE_RANGE
            ranges[int(ApiKey.SASL_AUTHENTICATE)] = SASL_AUTHENTICATE_RANGE
        served = ApiVersionsResponse(
            api_keys=[
                ApiVersionsResponseKey(api_key=key, min_version=low, max_version=high)
                for key, (low, high) in sorted(ranges.items())
            ]
        )
        return to_kio(served, response_cls)

    # -- answering --------------------------------------------------------------------------------

    def encode(self, call: Call, response: Response | None) -> Answer:
        if response is None:
            return b""  # Produce with acks=0: Kafka sends nothing back
        origin = call.origin
        assert isinstance(origin, _Origin)
        context = call.context
        if isinstance(response, ProduceResponse):
            return encode_produce_response(context.correlation_id, context.api_version, response)
        if isinstance(response, FetchResponse):
            note = origin.note
            assert note is None or isinstance(note, FetchByIds)
            session_id = 0
            if origin.fetch is not None:
                response, session_id = origin.fetch.answer(response)
            return encode_fetch_response(
                context.correlation_id,
                context.api_version,
                response,
                note,
                self.protocol.topics,
                session_id,
            )
        answer = origin.api.kio_response(
            response, origin.response_cls, origin.note, self.protocol.topics
        )
        return encode_response(call.context.correlation_id, answer)

    def error(self, call: Call, code: ErrorCode) -> Answer:
        return self.encode(call, error_response(call.request, code))


@dataclass(frozen=True, slots=True)
class _Origin:
    """What answering a call needs beyond the native response."""

    api: KafkaApi
    response_cls: type[Any]
    note: object  # the API's request hook's note (Fetch by id: the names it fetched under)
    fetch: FetchContext | None = None  # the Fetch's session context, if it names a session
