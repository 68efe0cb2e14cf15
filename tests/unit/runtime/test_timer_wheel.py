"""The timing wheel against a reference model: random adds, cancels and clock advances."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.timer import CallbackTask, TimerTask, TimingWheel


def _noop() -> None:
    return None


@dataclass
class Model:
    """What should be pending: task -> deadline. A task may fire once the clock reaches its
    deadline and must have fired once the clock reaches the last millisecond of its root tick
    (with a 1 ms tick: exactly at its deadline)."""

    tick_ms: int
    pending: dict[TimerTask, int] = field(default_factory=dict)

    def may_fire(self, now_ms: int) -> set[TimerTask]:
        return {t for t, d in self.pending.items() if d <= now_ms}

    def must_fire(self, now_ms: int) -> set[TimerTask]:
        tick = self.tick_ms
        return {t for t, d in self.pending.items() if d // tick * tick + tick - 1 <= now_ms}


add_op = st.tuples(st.just("add"), st.integers(min_value=-5, max_value=2_000_000))
cancel_op = st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=10_000))
advance_op = st.tuples(
    st.just("advance"),
    st.one_of(st.integers(min_value=0, max_value=50), st.integers(min_value=0, max_value=500_000)),
)


@settings(max_examples=300)
@given(
    tick_ms=st.sampled_from([1, 1, 3]),
    wheel_size=st.sampled_from([20, 2, 7]),
    start_ms=st.integers(min_value=0, max_value=10_000),
    ops=st.lists(st.one_of(add_op, cancel_op, advance_op), max_size=120),
)
def test_wheel_matches_reference_model(
    tick_ms: int, wheel_size: int, start_ms: int, ops: list[tuple[str, int]]
) -> None:
    wheel = TimingWheel(tick_ms, wheel_size, start_ms)
    model = Model(tick_ms)
    now = start_ms
    fired: set[TimerTask] = set()
    for op, value in ops:
        if op == "add":
            new = CallbackTask(now + value, _noop)
            if wheel.add(new):
                model.pending[new] = new.deadline_ms
            else:
                assert new.deadline_ms <= now, "refused a task that is not due"
        elif op == "cancel" and model.pending:
            task = list(model.pending)[value % len(model.pending)]
            task.cancel()
            del model.pending[task]
        elif op == "advance":
            now += value
            due = wheel.advance_clock(now)
            assert len(due) == len(set(due)), "a task was returned twice"
            assert model.must_fire(now) <= set(due) <= model.may_fire(now)
            for task in due:
                assert task not in fired
                fired.add(task)
                del model.pending[task]
        assert len(wheel) == len(model.pending)


def test_worked_example_from_the_docstring() -> None:
    wheel = TimingWheel(1, 20, 0)
    tasks = {d: CallbackTask(d, _noop) for d in (5, 19, 25, 410)}
    for task in tasks.values():
        assert wheel.add(task)
    assert wheel.levels == 3
    assert wheel.next_expiration_ms() == 5
    assert wheel.advance_clock(24) == [tasks[5], tasks[19]]
    assert wheel.advance_clock(25) == [tasks[25]]
    assert wheel.advance_clock(409) == []
    assert wheel.advance_clock(410) == [tasks[410]]
    assert len(wheel) == 0


def test_far_deadline_cascades_through_every_level_and_fires_on_time() -> None:
    wheel = TimingWheel(1, 20, 0)
    deadline = 20**6 + 12_345
    task = CallbackTask(deadline, _noop)
    assert wheel.add(task)
    assert wheel.levels == 7
    assert wheel.advance_clock(deadline - 1) == []
    assert len(wheel) == 1
    assert wheel.advance_clock(deadline) == [task]


def test_cancel_frees_the_slot_and_an_emptied_bucket_is_not_reported() -> None:
    wheel = TimingWheel(1, 20, 0)
    task = CallbackTask(7, _noop)
    wheel.add(task)
    task.cancel()
    task.cancel()
    assert len(wheel) == 0
    assert task.cancelled
    assert wheel.next_expiration_ms() is None
    assert wheel.advance_clock(100) == []
    assert not wheel.add(task), "a cancelled task is never placed again"


def test_readding_a_pending_task_moves_it() -> None:
    wheel = TimingWheel(1, 20, 0)
    task = CallbackTask(5, _noop)
    wheel.add(task)
    task.deadline_ms = 300
    wheel.add(task)
    assert len(wheel) == 1
    assert wheel.advance_clock(299) == []
    assert wheel.advance_clock(300) == [task]


def test_clear_removes_everything() -> None:
    wheel = TimingWheel(1, 20, 0)
    tasks = [CallbackTask(d, _noop) for d in (3, 30, 3_000, 300_000)]
    for task in tasks:
        wheel.add(task)
    assert set(wheel.clear()) == set(tasks)
    assert len(wheel) == 0
    assert wheel.next_expiration_ms() is None
