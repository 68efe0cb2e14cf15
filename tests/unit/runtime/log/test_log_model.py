"""Stateful property test: the log against a plain list of batches, through appends,
truncations, rolls, log start increments, retention, clean reopens and crashes."""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.dump import dump_log_files
from runtime.log.log import Log
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import iter_batches

from .helpers import WALL_MS

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=120, segment_index_bytes=96)


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="ketch-model-"))
        self.clock = ManualClock()
        self.log = Log.open(self.root / "m-0", CONFIG, self.clock)
        self.batches: list[tuple[int, int]] = []  # (base offset, record count), in order
        self.log_start = 0

    @property
    def leo(self) -> int:
        return self.batches[-1][0] + self.batches[-1][1] if self.batches else self.log_start

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root)

    @rule(count=st.integers(1, 5), epoch=st.integers(0, 3))
    def append(self, count: int, epoch: int) -> None:
        epoch = max(epoch, self.log.latest_epoch or 0)  # leaders never go back in epoch
        records = [(b"k", b"value-%d" % i) for i in range(count)]
        info = self.log.append_as_leader(
            build_batch(records, base_timestamp=WALL_MS + len(self.batches)), epoch
        )
        assert info.first_offset == self.leo
        self.batches.append((info.first_offset, count))

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        # Truncation points are batch boundaries in practice (epoch start offsets, HWs), plus
        # the log start offset, which may sit inside a batch, and offsets beyond the LEO.
        boundaries = sorted({self.log_start} | {b for b, _ in self.batches if b > self.log_start})
        target = data.draw(
            st.sampled_from(boundaries) | st.integers(self.leo, self.leo + 2), label="target"
        )
        self.log.truncate_to(target)
        if target >= self.leo:
            return
        kept = [(b, c) for b, c in self.batches if b + c <= target]
        if kept and kept[-1][0] + kept[-1][1] < self.log_start:
            kept = []  # nothing readable left: the log restarts empty at the log start
        self.batches = kept

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def raise_log_start(self, data: st.DataObject) -> None:
        self.log.update_high_watermark(self.leo)
        new_start = data.draw(st.integers(self.log_start, self.leo), label="log start")
        self.log.maybe_increment_log_start_offset(new_start)
        self.log_start = max(self.log_start, new_start)
        self.log.delete_old_segments()
        assert self.log.log_start_offset == self.log_start

    @rule()
    def reopen_clean(self) -> None:
        start, recovery_point = self.log.log_start_offset, self.log.recovery_point
        self.log.flush()
        self.log.close()
        self.log = Log.open(
            self.root / "m-0",
            CONFIG,
            self.clock,
            log_start_offset=start,
            recovery_point=recovery_point,
            had_clean_shutdown=True,
        )
        self._check_files()

    @rule(flush=st.booleans())
    def crash(self, flush: bool) -> None:
        if flush:
            self.log.flush()
        start, recovery_point = self.log.log_start_offset, self.log.recovery_point
        for segment in self.log.segments:
            segment.close_handles()
        self.log = Log.open(
            self.root / "m-0",
            CONFIG,
            self.clock,
            log_start_offset=start,
            recovery_point=recovery_point,
        )
        assert self.log.recovery_report.truncation is None
        self._check_files()

    def _check_files(self) -> None:
        out = io.StringIO()
        assert dump_log_files([self.root / "m-0"], out, verify_index=True) == 0, out.getvalue()

    @invariant()
    def matches_the_model(self) -> None:
        log = self.log
        assert log.log_start_offset == self.log_start
        assert log.log_end_offset == max(self.leo, self.log_start), (log.log_end_offset, self.leo)
        expected = [
            (b + i, b"value-%d" % i)
            for b, c in self.batches
            for i in range(c)
            if b + i >= self.log_start
        ]
        got: list[tuple[int, bytes | None]] = []
        position = self.log_start
        while position < log.log_end_offset:
            data = log.read(position, 10_000).records
            assert data, f"empty read at {position}"
            for pos, _ in iter_batches(data):
                got += [
                    (r.offset, r.value) for r in iter_records(data, pos) if r.offset >= position
                ]
            position = got[-1][0] + 1 if got else log.log_end_offset
        assert got == expected


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
