"""A Kafka ApiVersions request sent by hand over TCP, to tell that a Kafka listener answers;
shared by the `ketch broker` process test (test_broker_main.py) and `ketch up`'s
(test_up.py). Each call opens and closes its own connection: no state."""

from __future__ import annotations

import asyncio
import struct
from typing import Final

from runtime.net.transport import Address
from wire.errors import ErrorCode

API_VERSIONS: Final = 18  # Kafka's API key
WAIT_S: Final = 30.0  # bound on connecting and on each read: a listener answers far sooner


async def kafka_api_versions(address: Address, *, correlation_id: int) -> tuple[int, ErrorCode]:
    """One ApiVersions v0 request in Kafka's framing, by hand: (correlation id, error code) of
    the answer. Header v1: api_key, api_version, correlation_id, client_id; an empty body."""
    client_id = b"ketch-test"
    header = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(client_id)) + client_id
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(address.host, address.port), WAIT_S
    )
    try:
        writer.write(struct.pack(">i", len(header)) + header)
        await writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), WAIT_S))
        body = await asyncio.wait_for(reader.readexactly(size), WAIT_S)
    finally:
        writer.close()
        await writer.wait_closed()
    answered, error = struct.unpack_from(">ih", body)
    return answered, ErrorCode.from_code(error)
