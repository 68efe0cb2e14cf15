"""Hostile byte streams against the server: it answers or closes that connection, never more.

Each example sends a mix of valid request frames, mutated frames and random bytes, cut into
random chunks, then checks that (a) whatever came back is a well-formed response sequence with
correlation ids in request order and (b) the server still serves a fresh connection.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.clock import ManualClock
from runtime.net.dialect import RequestContext
from runtime.net.memory import MemoryNetwork
from runtime.net.server import (
    Server,
    ServerConfig,
)
from runtime.net.transport import Address, Stream
from wire.envelope import (
    RequestEnvelope,
    ResponseEnvelope,
    decode_request,
    decode_response,
    encode_request,
)
from wire.errors import ProtocolError
from wire.frames import FrameDecoder, encode_frame
from wire.messages import ApiKey, ApiVersionsRequest, MetadataRequest, MetadataResponse

ADDRESS = Address("broker", 9092)
MAX_FRAME_BYTES = 4096


def _valid_frame(correlation_id: int, metadata: bool) -> bytes:
    request = MetadataRequest() if metadata else ApiVersionsRequest()
    envelope = RequestEnvelope(
        request.API_KEY, request.API_VERSION, correlation_id, "fuzz", request.to_body()
    )
    return encode_frame(encode_request(envelope))


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    frame = bytearray(_valid_frame(draw(st.integers(0, 2**31 - 1)), draw(st.booleans())))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(frame) - 1))
        frame[position] = draw(st.integers(0, 255))
    return bytes(frame)


_pieces = st.lists(
    st.one_of(
        st.builds(_valid_frame, st.integers(-(2**31), 2**31 - 1), st.booleans()),
        _mutated(),
        st.binary(max_size=64),
    ),
    max_size=8,
)


async def _metadata(request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
    await asyncio.sleep(0)
    return MetadataResponse(controller_id=ctx.correlation_id)


def _expected_ids(data: bytes) -> tuple[list[int], bool]:
    """Correlation ids of the requests the server can decode, and whether all of `data` was."""
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    decoder.feed(data)
    ids: list[int] = []
    try:
        while (frame := decoder.next_frame()) is not None:
            ids.append(decode_request(frame).correlation_id)
    except ProtocolError:
        return ids, False
    return ids, decoder.buffered_bytes == 0


async def _answers(stream: Stream) -> list[int]:
    """Correlation ids of every response the server sends before it goes quiet or closes."""
    decoder = FrameDecoder()
    ids: list[int] = []
    while True:
        receiving = asyncio.ensure_future(stream.receive())
        for _ in range(200):  # the in-memory network and the handlers need only loop turns
            if receiving.done():
                break
            await asyncio.sleep(0)
        if not receiving.done():
            receiving.cancel()
            await asyncio.gather(receiving, return_exceptions=True)
            return ids
        chunk = receiving.result()
        if not chunk:
            return ids
        decoder.feed(chunk)
        while (frame := decoder.next_frame()) is not None:
            ids.append(decode_response(frame).correlation_id)


async def _scenario(pieces: list[bytes], cuts: list[int]) -> None:
    clock = ManualClock()
    network = MemoryNetwork(seed=0, clock=clock)
    server = Server(
        network.transport("broker"),
        ADDRESS,
        {ApiKey.METADATA: _metadata},
        clock=clock,
        config=ServerConfig(socket_request_max_bytes=MAX_FRAME_BYTES, queued_max_requests=4),
    )
    await server.start()
    try:
        stream = await network.transport("fuzzer").connect(ADDRESS, timeout_s=1.0)
        data = b"".join(pieces)
        start = 0
        for cut in [*sorted({c % (len(data) + 1) for c in cuts}), len(data)]:
            try:
                await stream.send(data[start:cut])
            except ConnectionError:
                break  # the server closed us: allowed
            start = cut
        expected, clean = _expected_ids(data)
        answered = await _answers(stream)
        assert answered == expected[: len(answered)], "answers out of order or invented"
        if clean:
            assert answered == expected, "a well-framed request went unanswered"
        await stream.aclose()
        # The server is still fine: a new connection is served normally.
        fresh = await network.transport("checker").connect(ADDRESS, timeout_s=1.0)
        await fresh.send(_valid_frame(77, metadata=True))
        decoder = FrameDecoder()
        frame = None
        async with asyncio.timeout(5):
            while frame is None:
                chunk = await fresh.receive()
                assert chunk, "server closed a healthy connection"
                decoder.feed(chunk)
                frame = decoder.next_frame()
        response: ResponseEnvelope = decode_response(frame)
        assert response.correlation_id == 77
        assert MetadataResponse.from_body(response.body).controller_id == 77
        await fresh.aclose()
    finally:
        async with asyncio.timeout(5):
            await server.stop()


@settings(max_examples=150)
@given(pieces=_pieces, cuts=st.lists(st.integers(0, 10_000), max_size=6))
def test_hostile_streams_only_ever_close_their_own_connection(
    pieces: list[bytes], cuts: list[int]
) -> None:
    asyncio.run(_scenario(pieces, cuts))
