"""The native phase of `python -m bench.throughput`: ketch's own Python producer (client/, over
ketch's native protocol) pushing `total_bytes` of `record_bytes` values as fast as it can, to
be set against librdkafka's ingest of the same shape in the same run.

The producer is the one `ketch bench latency` uses (`bench.latency_scenarios.Bench.producer`):
acks=1, linger.ms=5 like the librdkafka ingest, and the client's defaults otherwise (16 KiB
batches: the Java producer's default, which ketch's client keeps). It has no buffer.memory
bound of its own (send() never blocks on a full buffer), so, like `ketch produce`, the phase
keeps at most WINDOW_BYTES of records unacknowledged and awaits the oldest before sending more;
without a bound every record would be queued before the first request left. (1, 4 and 16 MiB
windows measured 42, 41 and 34 MiB/s here: the window is not what limits it.)

It runs on the benchmark's event loop (the producer is an asyncio object); its state lives in
the coroutine's locals.
"""

from __future__ import annotations

import asyncio
import collections
import os
from typing import Final

from bench.latency_scenarios import Bench
from bench.throughput_meter import CpuMeter, Window
from bench.throughput_summary import MIB, Phase
from client.accumulator import RecordMetadata

ACKS_LEADER: Final = 1
LINGER_MS: Final = 5
WINDOW_BYTES: Final = 4 * MIB
PHASE_TIMEOUT_S: Final = 120.0


async def native_ingest(
    bench: Bench, topic: str, *, record_bytes: int, total_bytes: int, meter: CpuMeter
) -> Phase:
    """One warm-up record (metadata, connection) before the clock, then the measured records:
    the window ends when every one is acknowledged."""
    value = os.urandom(record_bytes)
    count = total_bytes // record_bytes
    assert count > 0, (total_bytes, record_bytes)
    window_records = max(1, WINDOW_BYTES // record_bytes)
    async with bench.producer(ACKS_LEADER, linger_ms=LINGER_MS) as producer:
        await producer.send_and_wait(topic, None, value)
        pending: collections.deque[asyncio.Future[RecordMetadata]] = collections.deque()
        window = Window(meter)
        async with asyncio.timeout(PHASE_TIMEOUT_S):
            window.start()
            for _ in range(count):
                pending.append(await producer.send(topic, None, value))
                if len(pending) > window_records:
                    await pending.popleft()  # raises the record's error, if it failed
            await producer.flush()
            measured = window.stop()
        for future in pending:
            future.result()  # flush leaves failures on the futures
    return Phase(measured.elapsed_ns, measured.cpu_s, count * record_bytes, count)
