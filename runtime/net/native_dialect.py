"""ketch's native protocol on a `Server`: msgpack envelopes and the cluster-credential exchange.

A well-framed native request the server cannot serve is answered instead of closing the
connection (the server's docstring has the table): an unknown API key or version, or no handler,
UNSUPPORTED_VERSION; a body that does not match its fields, INVALID_REQUEST; a control-plane API
on an unauthenticated connection, CLUSTER_AUTHORIZATION_FAILED. SaslHandshake (17) and
SaslAuthenticate (36) are answered here, synchronously in the reader, so a request pipelined
behind the final SaslAuthenticate already sees the connection authenticated (`runtime.net.auth`
has the exchange). One `NativeDialect` serves one connection and holds its SASL state
(`runtime.net.native_sasl.NativeAuthentication`).

On a native listener whose security protocol is SASL_PLAINTEXT or SASL_SSL (`native_dialect(
sasl)`), users log in with sasl.enabled.mechanisms as on the Kafka listener, and the cluster
credential stays for node-to-node traffic (runtime/net/native_sasl.py). Until the connection has
authenticated, a request other than ApiVersions is answered ILLEGAL_SASL_STATE (the native
dialect answers what it will not serve, where Kafka's closes the connection; the answer tells
ketch's client why instead of a lost connection it would retry), a frame over
sasl.server.max.receive.size closes the connection (`max_frame_bytes`), and a failed user login
is answered SASL_AUTHENTICATION_FAILED and then closes it. A control-plane API from a connection
that is not a cluster member is CLUSTER_AUTHORIZATION_FAILED whoever logged in.
`RequestContext.principal` is `User:NAME` once a user has logged in, else User:ANONYMOUS.

Fetch sessions (KIP-227): given the broker's `FetchSessionCache` (runtime/net/fetch_session.py,
one per broker, shared with the Kafka listener), a follower's Fetch (replica_id >= 0) that names
a session is served in that session's context. Who may fetch as a follower is the listener's
guards' business, as it is without sessions (on a SASL or ACL-guarded listener, cluster members
only: node/broker/native_security.py; an open listener's fetchers do not prove the cluster
credential, and a session gives nothing a sessionless follower fetch does not: each of its
requests still goes through the handler with its connection's context). `admit` turns an
incremental request into the session's full native request, or answers a session error
(FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) at once, and `encode` keeps only the
partitions the follower must be told of and sets the answer's session id. Any other Fetch is
served sessionless, whatever its session fields say, and answered with session id 0 (what a
full cache answers too), so a client that asks for a session simply does not get one. Both run
on the loop thread, the cache's owner.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Final

from runtime.net.dialect import (
    Answer,
    Call,
    CloseAfterAnswer,
    DialectFactory,
    Handler,
    RequestContext,
)
from runtime.net.fetch_session import FINAL_EPOCH, FetchContext, FetchSessionCache, error_answer
from runtime.net.native_sasl import NativeAuthentication, NativeSasl
from runtime.net.sasl import SaslReply
from runtime.net.transport import Stream
from wire.envelope import (
    LARGE_BIN_BYTES,
    ResponseEnvelope,
    decode_request,
    encode_response,
    encode_response_buffers,
)
from wire.errors import ErrorCode
from wire.frames import encode_frame
from wire.messages import (
    CONTROL_PLANE_API_KEYS,
    ApiKey,
    FetchRequest,
    FetchResponse,
    MessageError,
    Request,
    Response,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    UnsupportedVersionError,
    error_body,
    request_class,
)

if TYPE_CHECKING:
    from runtime.net.server import Server

_log = logging.getLogger(__name__)

_SASL_API_KEYS: Final = frozenset({int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)})


def _response_frame(correlation_id: int, body: dict[str, Any]) -> bytes:
    return encode_frame(encode_response(ResponseEnvelope(correlation_id, body)))


def _carries_large_records(response: FetchResponse) -> bool:
    """Whether a record set is large enough to leave as a buffer of its own: a follower's fetch
    is mostly empty or a few records, and then packing it whole is cheaper than cutting it."""
    return any(
        len(partition.records) >= LARGE_BIN_BYTES
        for topic in response.responses
        for partition in topic.partitions
    )


class NativeDialect:
    """ketch's own protocol (msgpack envelopes) with the cluster-credential SASL exchange."""

    def __init__(
        self,
        server: Server,
        stream: Stream,
        *,
        sasl: NativeSasl | None = None,
        fetch_sessions: FetchSessionCache | None = None,
    ) -> None:
        self.server = server
        self.fetch_sessions = fetch_sessions
        self.peer = stream.peer
        self.authentication = NativeAuthentication(
            server.cluster_secret, sasl, stream.peer, stream.tls_principal
        )
        self.authenticator = self.authentication.cluster  # the cluster credential's exchange

    def max_frame_bytes(self) -> int | None:
        return self.authentication.max_frame_bytes()

    def admit(self, frame: memoryview) -> Answer | Call:
        envelope = decode_request(frame)
        correlation_id = envelope.correlation_id
        try:
            request_cls = request_class(envelope.api_key, envelope.api_version)
        except UnsupportedVersionError:
            return _response_frame(correlation_id, error_body(ErrorCode.UNSUPPORTED_VERSION))
        api_key = envelope.api_key
        is_sasl = api_key in _SASL_API_KEYS
        authentication = self.authentication
        if api_key in CONTROL_PLANE_API_KEYS and not authentication.cluster_member:
            return _error_frame(request_cls, correlation_id, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        if not is_sasl and not authentication.admits(api_key):
            return _error_frame(request_cls, correlation_id, ErrorCode.ILLEGAL_SASL_STATE)
        handler = self.server.handler_for(api_key)
        if handler is None and not is_sasl:
            return _response_frame(correlation_id, error_body(ErrorCode.UNSUPPORTED_VERSION))
        try:
            request = request_cls.from_body(envelope.body)
        except MessageError as exc:
            _log.info("malformed request from %s: %s", self.peer, exc)
            return _error_frame(request_cls, correlation_id, ErrorCode.INVALID_REQUEST)
        if is_sasl:
            return self._sasl_answer(correlation_id, request)
        assert handler is not None
        context = RequestContext(
            peer=self.peer,
            client_id=envelope.client_id,
            api_key=api_key,
            api_version=envelope.api_version,
            correlation_id=correlation_id,
            cluster_member=authentication.cluster_member,
            listener=self.server.listener,
            principal=authentication.principal,
        )
        if isinstance(request, FetchRequest) and self._in_session(request):
            return self._session_call(handler, request, context)
        return Call(handler, request, context)

    def _in_session(self, request: FetchRequest) -> bool:
        return (
            self.fetch_sessions is not None
            and request.replica_id >= 0
            and (request.session_id, request.session_epoch) != (0, FINAL_EPOCH)
        )

    def _session_call(
        self, handler: Handler, request: FetchRequest, context: RequestContext
    ) -> Answer | Call:
        sessions = self.fetch_sessions
        assert sessions is not None
        forgotten = [(t.topic, t.partitions) for t in request.forgotten_topics_data]
        fetch = sessions.new_context(request, request.session_id, request.session_epoch, forgotten)
        if not isinstance(fetch, FetchContext):
            return _response_frame(context.correlation_id, error_answer(fetch).to_body())
        return Call(handler, fetch.request, context, fetch)

    def encode(self, call: Call, response: Response | None) -> Answer:
        if response is None:
            return b""
        fetch = call.origin
        if (
            isinstance(fetch, FetchContext)
            and isinstance(response, FetchResponse)
            and response.error_code == ErrorCode.NONE  # a refused fetch opens no session
        ):
            answer, session_id = fetch.answer(response)
            response = dataclasses.replace(answer, session_id=session_id)
        if isinstance(response, FetchResponse) and _carries_large_records(response):
            # Record batches go out as the buffers the log read, not copied into the frame.
            envelope = ResponseEnvelope(call.context.correlation_id, response.to_body())
            return encode_response_buffers(envelope)
        return _response_frame(call.context.correlation_id, response.to_body())

    def error(self, call: Call, code: ErrorCode) -> bytes:
        return _error_frame(type(call.request), call.context.correlation_id, code)

    def _sasl_answer(self, correlation_id: int, request: Request) -> bytes:
        response, reply = self.authenticate(request)
        frame = _response_frame(correlation_id, response.to_body())
        if reply.close:
            name = type(request).__name__
            raise CloseAfterAnswer(frame, f"{name}: {reply.error.name}: {reply.message}")
        return frame

    def authenticate(self, request: Request) -> tuple[Response, SaslReply]:
        """The answer to a SaslHandshake / SaslAuthenticate, and whether to close after it."""
        authentication = self.authentication
        if isinstance(request, SaslHandshakeRequest):
            reply = authentication.handshake(request.mechanism)
            mechanisms = authentication.mechanisms
            return SaslHandshakeResponse(error_code=reply.error, mechanisms=mechanisms), reply
        assert isinstance(request, SaslAuthenticateRequest)
        reply = authentication.authenticate(request.auth_bytes)
        response = SaslAuthenticateResponse(
            error_code=reply.error, error_message=reply.message, auth_bytes=reply.auth_bytes
        )
        return response, reply


def native_dialect(
    sasl: NativeSasl | None, fetch_sessions: FetchSessionCache | None = None
) -> DialectFactory:
    """The `DialectFactory` of a native listener; `sasl` on a SASL_PLAINTEXT / SASL_SSL one;
    `fetch_sessions`, the broker's cache, to serve followers' fetch sessions."""

    def build(server: Server, stream: Stream) -> NativeDialect:
        return NativeDialect(server, stream, sasl=sasl, fetch_sessions=fetch_sessions)

    return build


def _error_frame(request_cls: type[Request], correlation_id: int, code: ErrorCode) -> bytes:
    return _response_frame(correlation_id, request_cls.RESPONSE.error_response(code).to_body())
