"""stdin's lines for `ketch produce`, read by a daemon thread (`LineReader`).

The event loop must keep sending while stdin is slow (a terminal): a typed line is sent within
linger.ms, values are sent byte for byte whatever their encoding, and Ctrl-C is not held up by
a read that never returns (the default executor's threads are joined at loop close; a daemon
thread is not). Moved here from cli/data.py unchanged but for its name.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections import deque
from typing import BinaryIO, Final, TextIO

from cli.common import CliError


class LineReader:
    """Lines of a blocking input, read by a daemon thread and handed to the loop in chunks
    through a bounded asyncio queue (the thread blocks while it is full: backpressure).

    When the input has a file descriptor (a real stdin: terminal, pipe or file) the thread
    reads it with `os.read`, never through `sys.stdin`'s buffered object: a daemon thread
    blocked inside that object holds its lock, and the interpreter aborts at exit when it
    cannot take it ("could not acquire lock ... at interpreter shutdown"), which is exactly
    what Ctrl-C during an interactive produce would do. Streams without a descriptor (a test's
    StringIO) are read with `readline()`, through their byte layer when they have one; text
    is encoded as UTF-8.

    The thread only reads and hands over via `run_coroutine_threadsafe`; the queue is touched
    by the loop thread alone. When the loop is gone (the command ended or was interrupted) the
    hand-over fails or is cancelled and the thread ends; a thread blocked in a read dies with
    the process. A read error is handed over too, so the command never waits forever.
    """

    QUEUE_CHUNKS: Final = 64
    READ_BYTES: Final = 65_536

    def __init__(self, stream: BinaryIO | TextIO) -> None:
        self._stream = stream
        self._fd = _file_descriptor(stream)
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[list[bytes] | OSError | ValueError | None] = asyncio.Queue(
            self.QUEUE_CHUNKS
        )
        self._lines: deque[bytes] = deque()
        self._done = False
        threading.Thread(target=self._run, name="ketch produce stdin", daemon=True).start()

    async def next_line(self) -> bytes | None:
        """The next line with its line end, or None at the end of the input."""
        while not self._lines and not self._done:
            item = await self._queue.get()
            if isinstance(item, OSError | ValueError):
                raise CliError(f"cannot read the input: {item}")
            if item is None:
                self._done = True
            else:
                self._lines.extend(item)
        return self._lines.popleft() if self._lines else None

    def _run(self) -> None:
        try:
            try:
                if self._fd is None:
                    self._read_lines()
                else:
                    self._read_fd(self._fd)
            except (OSError, ValueError) as exc:  # stdin closed, or undecodable text
                self._hand_over(exc)
                return
            self._hand_over(None)
        except (RuntimeError, concurrent.futures.CancelledError):
            pass  # the loop has ended (command done or interrupted): nobody waits for lines

    def _read_fd(self, fd: int) -> None:
        partial = b""
        while chunk := os.read(fd, self.READ_BYTES):
            *complete, partial = (partial + chunk).split(b"\n")
            if complete:
                self._hand_over([line + b"\n" for line in complete])
        if partial:
            self._hand_over([partial])  # a last line without a line end

    def _read_lines(self) -> None:
        # A text stream with a byte layer is read through it, so bytes pass unchanged here too.
        source: BinaryIO | TextIO = getattr(self._stream, "buffer", self._stream)
        while line := source.readline():
            self._hand_over([line.encode() if isinstance(line, str) else line])

    def _hand_over(self, item: list[bytes] | OSError | ValueError | None) -> None:
        asyncio.run_coroutine_threadsafe(self._queue.put(item), self._loop).result()


def _file_descriptor(stream: BinaryIO | TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None
