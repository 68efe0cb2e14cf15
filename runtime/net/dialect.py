"""What a protocol dialect and a handler share with the server: calls, contexts and dialects.

A `Server` (runtime/net/server.py) serves one listener in one dialect. The dialect turns each
frame into a `Call` (the handler, the typed native request, its `RequestContext`) or a ready
answer, and frames the handler's response; handlers see only the native request and the context.
Two dialects exist: ketch's native protocol (runtime/net/native_dialect.py) and Kafka's
(runtime/net/kafka_dialect.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from runtime.net.security_protocol import ANONYMOUS_PRINCIPAL
from runtime.net.transport import Buffer, Stream
from wire.errors import ErrorCode
from wire.messages import Request, Response

if TYPE_CHECKING:
    from runtime.net.server import Server


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler may know about where a request came from."""

    peer: str
    client_id: str | None
    api_key: int
    api_version: int
    correlation_id: int
    cluster_member: bool  # the connection proved the cluster credential
    # The listener the request arrived on (Kafka's ListenerName): which addresses an answer
    # names (Metadata, FindCoordinator) and which protocol's rules apply.
    listener: str
    # Who the connection authenticated as (Kafka's KafkaPrincipal, `User:NAME`): what an
    # authorizer decides on. Set by the listener's security protocol (SASL, a TLS client
    # certificate); `runtime.net.security_protocol.ANONYMOUS_PRINCIPAL` when nothing proved one.
    principal: str = ANONYMOUS_PRINCIPAL


Answer = bytes | list[Buffer]
"""A framed response: one bytes object, or buffers sent back to back without being joined (a
Fetch answer's record batches as read from their segments). b"" (or []) sends nothing."""

Handler = Callable[[Any, RequestContext], Awaitable[Response | None]]
"""`handler(request, ctx) -> response`; registered by API key, called for every version."""


@dataclass(frozen=True, slots=True)
class Call:
    """A decoded request for a handler, and how its answer is framed in the request's dialect."""

    handler: Handler
    request: Request
    context: RequestContext
    # Whatever else the dialect needs to frame the answer (the Kafka dialect: the decoded
    # request, whose fields some answers echo).
    origin: object = None


class CloseAfterAnswer(Exception):
    """Raised by `Dialect.admit`: write `answer` (after every answer owed before it), then close
    the connection; nothing more is read from it. A refused SASL authentication is answered
    (Kafka's SASL_AUTHENTICATION_FAILED) and then the connection closes, as Kafka's does."""

    def __init__(self, answer: Answer, reason: str) -> None:
        super().__init__(reason)
        self.answer = answer


class Dialect(Protocol):
    """One connection's protocol: cuts requests out of frames and frames their answers.

    `admit(frame)` (a read-only view of the frame's payload, valid for as long as it is held)
    returns either a ready response frame (b"": no response), answered in order without calling
    a handler, or a `Call` to serve; it raises `ProtocolError` when the frame
    cannot be trusted, which closes the connection. `encode(call, response)` frames a handler's
    answer (None: no response, b""); `error(call, code)` frames an error answer for a handler
    that failed. A dialect object serves one connection (it may hold that connection's session
    state, such as the native SASL exchange).

    A dialect may also have `max_frame_bytes() -> int | None`: the largest frame it accepts
    next (None: socket.request.max.bytes), asked after each frame it admits (the Kafka
    listener's pre-authentication limit). It may raise `CloseAfterAnswer` from `admit`.
    """

    def admit(self, frame: memoryview) -> Answer | Call: ...

    def encode(self, call: Call, response: Response | None) -> Answer: ...

    def error(self, call: Call, code: ErrorCode) -> Answer: ...


DialectFactory = Callable[["Server", Stream], Dialect]
"""Builds the dialect of each accepted connection."""
