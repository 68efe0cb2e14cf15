"""The process floor's echo server (bench/echo_process.py): it answers the bare echo from
another process, and is gone once its block ends."""

from __future__ import annotations

import asyncio

import pytest

from bench.echo_process import echo_server_process
from bench.rpc import Tally, echo_floor


def test_the_echo_process_answers_round_trips_and_is_killed_after() -> None:
    serial = Tally()
    with echo_server_process("asyncio") as port:
        asyncio.run(echo_floor(50, 5, serial, Tally(), port=port))
    assert serial.requests == 50
    assert serial.histogram.get_total_count() == 50

    async def connect() -> None:
        await asyncio.open_connection("127.0.0.1", port)

    with pytest.raises(ConnectionRefusedError):
        asyncio.run(connect())
