"""The request server's test harness: a `Server` on the in-memory network and a manual clock,
raw clients that write frames by hand (so a test can pipeline, send garbage, stop reading or
vanish at exactly the moment it wants), and a gated handler.

Used by test_server.py, test_server_connections.py and test_native_dialect.py. Each `Harness`
owns its clock, network and server; a test owns its harness and its clients.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from runtime.clock import ManualClock
from runtime.net.dialect import Handler, RequestContext
from runtime.net.memory import MemoryNetwork
from runtime.net.server import Server, ServerConfig
from runtime.net.transport import Address, Stream
from wire.envelope import RequestEnvelope, ResponseEnvelope, decode_response, encode_request
from wire.frames import FrameDecoder, encode_frame
from wire.messages import MetadataRequest, MetadataResponse, Request

SEED = 4
ADDRESS = Address("broker", 9092)
SECRET = b"test-cluster-secret-0123456789"


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let the loop run until `condition` holds; the in-memory network needs no real time."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what} (seed={SEED})")


class RawClient:
    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.frames: deque[bytes] = deque()
        self.eof = False

    async def send(self, correlation_id: int, request: Request) -> None:
        await self.send_body(
            request.API_KEY, request.API_VERSION, correlation_id, request.to_body()
        )

    async def send_body(
        self, api_key: int, api_version: int, correlation_id: int, body: dict[str, Any]
    ) -> None:
        envelope = RequestEnvelope(api_key, api_version, correlation_id, "test-client", body)
        await self.stream.send(encode_frame(encode_request(envelope)))

    async def response(self) -> ResponseEnvelope | None:
        """The next response; None once the server closed the connection."""
        async with asyncio.timeout(5):
            while not self.frames and not self.eof:
                data = await self.stream.receive()
                if not data:
                    self.eof = True
                    break
                self.decoder.feed(data)
                while (frame := self.decoder.next_frame()) is not None:
                    self.frames.append(bytes(frame))
        return decode_response(self.frames.popleft()) if self.frames else None

    async def call(self, correlation_id: int, request: Request) -> dict[str, Any]:
        await self.send(correlation_id, request)
        envelope = await self.response()
        assert envelope is not None, "connection closed instead of answering"
        assert envelope.correlation_id == correlation_id
        return envelope.body


class Harness:
    def __init__(
        self,
        handlers: Mapping[int, Handler],
        config: ServerConfig | None = None,
        secret: bytes | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.network = MemoryNetwork(seed=SEED, clock=self.clock)
        self.server = Server(
            self.network.transport("broker"),
            ADDRESS,
            handlers,
            clock=self.clock,
            config=config,
            cluster_secret=secret,
        )
        self._clients = 0

    async def __aenter__(self) -> Harness:
        await self.server.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.server.stop()

    async def connect(self) -> RawClient:
        self._clients += 1
        transport = self.network.transport(f"client-{self._clients}")
        return RawClient(await transport.connect(ADDRESS, timeout_s=1.0))


class Gate:
    """A handler whose requests wait until the test opens them, one correlation id at a time."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.finished: list[int] = []
        self.gates: dict[int, asyncio.Event] = {}

    def open(self, correlation_id: int) -> None:
        self.gates.setdefault(correlation_id, asyncio.Event()).set()

    async def __call__(self, request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
        self.started.append(ctx.correlation_id)
        await self.gates.setdefault(ctx.correlation_id, asyncio.Event()).wait()
        self.finished.append(ctx.correlation_id)
        return MetadataResponse(controller_id=ctx.correlation_id)
