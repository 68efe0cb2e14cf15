"""RPC round-trip benchmark: ketch's server and client against a bare msgpack echo.

    python -m bench.rpc [--requests N] [--rounds R] [--warmup N] [--loop uvloop|asyncio]
                        [--json FILE]

Three systems run in the same process and event loop (uvloop by default), each over TCP on
127.0.0.1, each answering the same ApiVersions request envelope:

* **floor**: a bare echo over asyncio streams. The client packs the request envelope ketch's
  client sends (4-byte length + msgpack map), the server unpacks it, packs a response envelope
  and writes it back. No typed messages, no dispatch: what Python itself costs for one framed
  msgpack round trip on this machine.
* **rpc**: `runtime.net.server.Server` on `TcpTransport` with a no-op ApiVersions handler,
  driven by the real `client.client.Client` (`send()` to an address: correlation, request
  timeout, typed decoding).
* **server**: the same server driven by a minimal pipelined client defined here (frames,
  checks correlation ids, decodes typed responses, nothing else), isolating the server's cost.

They run in R interleaved rounds (default 5), so load from elsewhere on the machine falls on
all of them alike. Each is measured with 1 request in flight (closed loop: latency) and with 64
in flight (a full window, or 64 concurrent callers for the real client: throughput). Latencies
go into HDR histograms (ns, 3 significant digits) and are reported in microseconds. The target
(issue 4) is rpc p50 <= 2x floor p50 at 1 in flight.

`--json FILE` writes `{"floor_p50_us", "floor_p99_us", "rpc_p50_us", "rpc_p99_us",
"rpc_p999_us", "rpc_inflight64_rps"}` (1 in flight unless named otherwise) plus every other
figure of the table under keys of the same pattern (`<system>[_inflight64]_<p50_us|p99_us|
p999_us|rps>`, `<system>_ratio_p50`, `<system>_ratio_inflight64_rps`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import struct
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
from hdrh.histogram import HdrHistogram

from client.client import Client
from client.config import ClientConfig
from runtime.clock import SystemClock
from runtime.net.dialect import RequestContext
from runtime.net.server import (
    Server,
    ServerConfig,
)
from runtime.net.tcp import TcpTransport, new_event_loop
from runtime.net.transport import Address, Stream
from wire.envelope import RequestEnvelope, decode_response, encode_request
from wire.frames import FrameDecoder, encode_frame
from wire.messages import ApiKey, ApiVersionsRequest, ApiVersionsResponse

WINDOW = 64
_LENGTH = struct.Struct(">i")
_HISTOGRAM_MAX_NS = 60 * 1_000_000_000


@dataclass(frozen=True, slots=True)
class Result:
    p50_us: float
    p99_us: float
    p999_us: float
    requests_per_s: float


@dataclass(slots=True)
class Tally:
    """Latencies and busy time of one system and mode, accumulated over the rounds."""

    histogram: HdrHistogram = field(default_factory=lambda: HdrHistogram(1, _HISTOGRAM_MAX_NS, 3))
    requests: int = 0
    elapsed_ns: int = 0

    def result(self) -> Result:
        def at(percentile: float) -> float:
            value_ns: int = self.histogram.get_value_at_percentile(percentile)
            return round(value_ns / 1000, 1)

        rps = round(self.requests * 1e9 / self.elapsed_ns) if self.elapsed_ns else 0
        return Result(at(50), at(99), at(99.9), rps)


def _request_payload(correlation_id: int) -> bytes:
    body = ApiVersionsRequest().to_body()
    envelope = RequestEnvelope(ApiKey.API_VERSIONS, 0, correlation_id, "bench", body)
    return encode_frame(encode_request(envelope))


async def _closed_loop(
    round_trip: Callable[[int], Awaitable[None]], requests: int, warmup: int, tally: Tally
) -> None:
    """One request at a time; each round trip's latency is recorded."""
    for i in range(warmup):
        await round_trip(i)
    record = tally.histogram.record_value
    start = time.perf_counter_ns()
    for i in range(requests):
        began = time.perf_counter_ns()
        await round_trip(warmup + i)
        record(time.perf_counter_ns() - began)
    tally.elapsed_ns += time.perf_counter_ns() - start
    tally.requests += requests


async def _window(
    send: Callable[[int], Awaitable[None]],
    receive: Callable[[int], Awaitable[None]],
    requests: int,
    tally: Tally,
) -> None:
    """Keep WINDOW requests outstanding on one connection; record each one's latency."""
    sent_at: deque[int] = deque()
    record = tally.histogram.record_value
    start = time.perf_counter_ns()
    sent = 0
    for _ in range(min(WINDOW, requests)):
        sent_at.append(time.perf_counter_ns())
        await send(sent)
        sent += 1
    for done in range(requests):
        await receive(done)
        record(time.perf_counter_ns() - sent_at.popleft())
        if sent < requests:
            sent_at.append(time.perf_counter_ns())
            await send(sent)
            sent += 1
    tally.elapsed_ns += time.perf_counter_ns() - start
    tally.requests += requests


# -- floor: bare msgpack echo over asyncio streams -----------------------------------------------


async def _echo_serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            (size,) = _LENGTH.unpack(await reader.readexactly(4))
            request = msgpack.unpackb(await reader.readexactly(size), raw=False)
            reply = msgpack.packb(
                {"correlation_id": request["correlation_id"], "body": request["body"]},
                use_bin_type=True,
            )
            writer.write(_LENGTH.pack(len(reply)) + reply)
            await writer.drain()
    except asyncio.IncompleteReadError:
        pass
    finally:
        writer.close()


async def echo_floor(
    requests: int, warmup: int, serial: Tally, windowed: Tally, *, port: int | None = None
) -> None:
    """The bare echo's round trips: against a server on this loop, or, given `port`, against
    one already listening there (bench/echo_process.py: another process, as a broker is)."""
    server = None
    if port is None:
        server = await asyncio.start_server(_echo_serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send(correlation_id: int) -> None:
        writer.write(_request_payload(correlation_id))

    async def receive(correlation_id: int) -> None:
        (size,) = _LENGTH.unpack(await reader.readexactly(4))
        reply = msgpack.unpackb(await reader.readexactly(size), raw=False)
        assert reply["correlation_id"] == correlation_id

    async def round_trip(correlation_id: int) -> None:
        await send(correlation_id)
        await receive(correlation_id)

    try:
        await _closed_loop(round_trip, requests, warmup, serial)
        await _window(send, receive, requests, windowed)
    finally:
        writer.close()
        await writer.wait_closed()
        if server is not None:
            server.close()
            await server.wait_closed()


async def serve_echo(ready: Callable[[int], None]) -> None:
    """The bare echo server on 127.0.0.1 and a port from the OS, until cancelled; `ready(port)`
    once it listens."""
    server = await asyncio.start_server(_echo_serve, "127.0.0.1", 0)
    ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


# -- ketch's server, with the real client and with a minimal one ---------------------------------


@contextlib.asynccontextmanager
async def _no_op_server(transport: TcpTransport) -> AsyncIterator[Server]:
    empty = ApiVersionsResponse()

    async def no_op(request: ApiVersionsRequest, ctx: RequestContext) -> ApiVersionsResponse:
        return empty

    server = Server(
        transport,
        Address("127.0.0.1", 0),
        {ApiKey.API_VERSIONS: no_op},
        clock=SystemClock(),
        config=ServerConfig(queued_max_requests=WINDOW),
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class _PipelinedClient:
    """Frames requests, matches responses by correlation id, decodes them into typed messages."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.frames: deque[memoryview] = deque()

    async def send(self, correlation_id: int) -> None:
        await self.stream.send(_request_payload(correlation_id))

    async def receive(self, correlation_id: int) -> None:
        while not self.frames:
            received = await self.stream.receive_into(self.decoder.receive_buffer())
            if not received:
                raise ConnectionError("server closed the connection")
            self.decoder.filled(received)
            while (frame := self.decoder.next_frame()) is not None:
                self.frames.append(frame)
        envelope = decode_response(self.frames.popleft())
        assert envelope.correlation_id == correlation_id, "responses out of order"
        ApiVersionsResponse.from_body(envelope.body)

    async def round_trip(self, correlation_id: int) -> None:
        await self.send(correlation_id)
        await self.receive(correlation_id)


async def _server_with_minimal_client(
    requests: int, warmup: int, serial: Tally, windowed: Tally
) -> None:
    transport = TcpTransport()
    async with _no_op_server(transport) as server:
        client = _PipelinedClient(await transport.connect(server.address, timeout_s=5.0))
        try:
            await _closed_loop(client.round_trip, requests, warmup, serial)
            await _window(client.send, client.receive, requests, windowed)
        finally:
            await client.stream.aclose()


async def _server_with_client(requests: int, warmup: int, serial: Tally, windowed: Tally) -> None:
    """The same server, driven by `client.client.Client` (timeouts, correlation, typing)."""
    transport = TcpTransport()
    request = ApiVersionsRequest()
    async with _no_op_server(transport) as server:
        config = ClientConfig(max_in_flight_requests_per_connection=WINDOW)
        client = Client([server.address], transport=transport, clock=SystemClock(), config=config)
        target = server.address

        async def round_trip(correlation_id: int) -> None:
            await client.send(target, request)

        async def caller(count: int) -> None:
            for _ in range(count):
                began = time.perf_counter_ns()
                await client.send(target, request)
                windowed.histogram.record_value(time.perf_counter_ns() - began)

        try:
            await _closed_loop(round_trip, requests, warmup, serial)
            # The client is called, not driven: WINDOW concurrent callers keep WINDOW in flight.
            per_caller = max(1, requests // WINDOW)
            start = time.perf_counter_ns()
            await asyncio.gather(*(caller(per_caller) for _ in range(WINDOW)))
            windowed.elapsed_ns += time.perf_counter_ns() - start
            windowed.requests += per_caller * WINDOW
        finally:
            await client.close()


# -- driver --------------------------------------------------------------------------------------

System = Callable[[int, int, Tally, Tally], Awaitable[None]]
SYSTEMS: dict[str, System] = {
    "floor": echo_floor,
    "rpc": _server_with_client,
    "server": _server_with_minimal_client,
}


async def _measure(requests: int, warmup: int, rounds: int) -> dict[str, Any]:
    # Rounds interleave the systems, so load from elsewhere on the machine falls on all of them
    # alike instead of on whichever happened to run at the time.
    tallies = {name: (Tally(), Tally()) for name in SYSTEMS}
    per_round = max(1, requests // rounds)
    for _ in range(rounds):
        for name, system in SYSTEMS.items():
            await system(per_round, warmup, *tallies[name])
    results = {
        name: (serial.result(), windowed.result()) for name, (serial, windowed) in tallies.items()
    }
    figures: dict[str, Any] = {}
    for name, (serial, windowed) in results.items():
        for prefix, result in ((name, serial), (f"{name}_inflight64", windowed)):
            figures[f"{prefix}_p50_us"] = result.p50_us
            figures[f"{prefix}_p99_us"] = result.p99_us
            figures[f"{prefix}_p999_us"] = result.p999_us
            figures[f"{prefix}_rps"] = result.requests_per_s
    floor, floor64 = results["floor"]
    for name in ("rpc", "server"):
        serial, windowed = results[name]
        figures[f"{name}_ratio_p50"] = round(serial.p50_us / floor.p50_us, 2)
        figures[f"{name}_ratio_inflight64_rps"] = round(
            windowed.requests_per_s / floor64.requests_per_s, 2
        )
    return figures


def _print_table(figures: dict[str, Any], loop_name: str, requests: int) -> None:
    print(f"bench.rpc: {requests} requests per system and mode, loop={loop_name}, 127.0.0.1 TCP")
    print(f"{'':28}{'p50 us':>9}{'p99 us':>9}{'p999 us':>9}{'req/s':>10}")
    rows = [
        ("floor (msgpack echo)", "floor"),
        ("rpc (server + client)", "rpc"),
        ("server + minimal client", "server"),
    ]
    for window, suffix in ((1, ""), (WINDOW, "_inflight64")):
        print(f"{window} in flight")
        for label, prefix in rows:
            key = prefix + suffix
            values = [figures[f"{key}_{k}"] for k in ("p50_us", "p99_us", "p999_us", "rps")]
            print(f"  {label:26}{values[0]:>9}{values[1]:>9}{values[2]:>9}{values[3]:>10}")
    for prefix, label in (("rpc", "server + client"), ("server", "server + minimal client")):
        print(
            f"{label}: p50 at 1 in flight {figures[f'{prefix}_ratio_p50']}x the floor "
            f"(target <= 2x); {WINDOW} in flight {figures[f'{prefix}_ratio_inflight64_rps']}x "
            "the floor's requests/s"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rpc", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--requests", type=int, default=20_000, help="measured requests per system and mode"
    )
    parser.add_argument(
        "--warmup", type=int, default=500, help="unmeasured requests per system and round"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per system")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.requests <= 0 or args.rounds <= 0 or args.warmup < 0:
        parser.error("--requests and --rounds must be positive, --warmup not negative")
    loop = new_event_loop() if args.loop == "uvloop" else asyncio.new_event_loop()
    try:
        figures = loop.run_until_complete(_measure(args.requests, args.warmup, args.rounds))
    finally:
        loop.close()
    _print_table(figures, type(loop).__module__.split(".")[0], args.requests)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
