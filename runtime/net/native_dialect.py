"""ketch's native protocol on a `Server`: msgpack envelopes and the cluster-credential exchange.

A well-framed native request the server cannot serve is answered instead of closing the
connection (the server's docstring has the table): an unknown API key or version, or no handler,
UNSUPPORTED_VERSION; a body that does not match its fields, INVALID_REQUEST; a control-plane API
on an unauthenticated connection, CLUSTER_AUTHORIZATION_FAILED. SaslHandshake (17) and
SaslAuthenticate (36) are answered here, synchronously in the reader, so a request pipelined
behind the final SaslAuthenticate already sees the connection authenticated (`runtime.net.auth`
has the exchange). One `NativeDialect` serves one connection and holds its SASL state.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from runtime.net import auth
from runtime.net.auth import ServerAuthenticator
from runtime.net.dialect import Answer, Call, RequestContext
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

    def __init__(self, server: Server, stream: Stream) -> None:
        self.server = server
        self.peer = stream.peer
        self.authenticator = ServerAuthenticator(server.cluster_secret)

    def admit(self, frame: memoryview) -> Answer | Call:
        envelope = decode_request(frame)
        correlation_id = envelope.correlation_id
        try:
            request_cls = request_class(envelope.api_key, envelope.api_version)
        except UnsupportedVersionError:
            return _response_frame(correlation_id, error_body(ErrorCode.UNSUPPORTED_VERSION))
        api_key = envelope.api_key
        is_sasl = api_key in _SASL_API_KEYS
        if api_key in CONTROL_PLANE_API_KEYS and not self.authenticator.authenticated:
            return _error_frame(request_cls, correlation_id, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        handler = self.server.handler_for(api_key)
        if handler is None and not is_sasl:
            return _response_frame(correlation_id, error_body(ErrorCode.UNSUPPORTED_VERSION))
        try:
            request = request_cls.from_body(envelope.body)
        except MessageError as exc:
            _log.info("malformed request from %s: %s", self.peer, exc)
            return _error_frame(request_cls, correlation_id, ErrorCode.INVALID_REQUEST)
        if is_sasl:
            return _response_frame(correlation_id, self.authenticate(request).to_body())
        assert handler is not None
        context = RequestContext(
            peer=self.peer,
            client_id=envelope.client_id,
            api_key=api_key,
            api_version=envelope.api_version,
            correlation_id=correlation_id,
            cluster_member=self.authenticator.authenticated,
            listener=self.server.listener,
        )
        return Call(handler, request, context)

    def encode(self, call: Call, response: Response | None) -> Answer:
        if response is None:
            return b""
        if isinstance(response, FetchResponse) and _carries_large_records(response):
            # Record batches go out as the buffers the log read, not copied into the frame.
            envelope = ResponseEnvelope(call.context.correlation_id, response.to_body())
            return encode_response_buffers(envelope)
        return _response_frame(call.context.correlation_id, response.to_body())

    def error(self, call: Call, code: ErrorCode) -> bytes:
        return _error_frame(type(call.request), call.context.correlation_id, code)

    def authenticate(self, request: Request) -> Response:
        if isinstance(request, SaslHandshakeRequest):
            code = self.authenticator.handshake(request.mechanism)
            return SaslHandshakeResponse(error_code=code, mechanisms=self.authenticator.mechanisms)
        assert isinstance(request, SaslAuthenticateRequest)
        code, auth_bytes = self.authenticator.authenticate(request.auth_bytes)
        if code is ErrorCode.NONE:
            return SaslAuthenticateResponse(auth_bytes=auth_bytes)
        _log.warning("cluster credential rejected for %s: %s", self.peer, code.name)
        message = f"{auth.MECHANISM} exchange failed ({code.name}); open a new connection"
        return SaslAuthenticateResponse(error_code=code, error_message=message)


def _error_frame(request_cls: type[Request], correlation_id: int, code: ErrorCode) -> bytes:
    return _response_frame(correlation_id, request_cls.RESPONSE.error_response(code).to_body())
