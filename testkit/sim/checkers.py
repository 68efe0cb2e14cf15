"""The invariants a simulated run must keep, as pure functions over its `History`.

Each checker takes a finished history and returns the violations it found (empty when the
invariant held); none reads a clock, a socket or a broker, so each is unit-tested with small
hand-built histories. `check_all` runs them all; `format_violations` prints the result. A
violation's message names the partition, offsets, values and brokers involved.

Why each holds in Kafka's replication model:

acknowledged_writes_kept
    With acks=all the leader answers only after every replica in the ISR has the write, and
    min.insync.replicas keeps that ISR from being too small; only an ISR member can be elected
    (no unclean election), and a new leader never truncates below the high watermark. So an
    acks=all write is in the final leader's log at its offset, with its value, below the HW.
    acks=1 writes may be lost when their leader dies; acks=0 writes are never known.
acknowledged_offsets_unique
    An offset is assigned once in a partition's history; only the uncommitted tail above the HW
    may be truncated and reused, and an acks=all answer comes after its offset is committed, so
    two acks=all answers cannot name one offset with different values.
acks_all_held_by_min_insync_replicas
    What acks=all with min.insync.replicas promises: the leader answers only once its whole ISR
    holds the write (the HW passed it) and that ISR has at least min.insync.replicas members
    (refused before the append, NOT_ENOUGH_REPLICAS_AFTER_APPEND after it). A follower counts
    only after a fetch showed its log past the write, and the leader holds it from its append.
    So at some quiescent point between the send and the answer, at least min.insync.replicas
    running replicas' logs reached past the write's offset. Judged from the observer's samples
    of each replica's own log end (`LogEnd`), not from the leader's bookkeeping; a replica stops
    counting when its broker stops (-1). Log ends say nothing of what is at the offset, so a
    stale replica past it counts too: the check can miss a violation, never invent one.
no_duplicates_from_idempotent_producers
    The leader keeps each producer's last sequence numbers (and moves them to a new leader in the
    log), so a retried batch is answered with its first offset instead of appended again. Copies
    from non-idempotent producers are legal and only counted (`duplicate_counts`).
reads_match_the_log
    A consumer only receives records below the HW, which are committed, so every record read is in
    the final log at the same offset; within one run of reads the consumer's position only moves
    forward, and it skips only offsets without a data record (control markers, compacted away).
replicas_agree_below_the_high_watermark
    Followers copy the leader's batches byte for byte and, on a leader change, truncate to the
    leader-epoch boundary (KIP-101/279) before fetching again, so every replica is a prefix of the
    leader up to its HW, and the ISR members (who by definition have caught up) hold all of it.
high_watermark_monotonic
    Within one leader epoch of one process's replica, the HW only moves forward.
one_leader_per_epoch
    The controller assigns each leader epoch to one leader; two brokers leading one epoch is
    split brain.
isr_never_empty
    The controller never shrinks the ISR to nothing (the last member stays as the leader goes to
    -1) and a leader is always a member of its ISR.
controller_epochs_monotonic
    A new active controller always has a higher epoch than the one before it.
group_generations_fenced
    A consumer group's coordinator hands out each generation once, with one assignment (the
    leader's) for all its members, and fences commits by generation: once a generation has been
    assigned, the coordinator's state (durable before it answers SyncGroup) refuses older ones.

Final-log checks skip topics the workload deleted and offsets below the final leader's log start
offset (records below it were removed by retention or DeleteRecords, not lost).

Stateless: every function reads only its argument.

Over 500 lines on purpose: a dozen invariants, each with the reasoning that makes it hold,
kept in the one list the runner applies.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from testkit.sim.history import ACKS_ALL, History, IsrChange, LogEnd, Read, ReplicaState
from wire.topic import TopicPartition

_SHOWN_BYTES: Final = 32  # a value longer than this is cut in messages


@dataclass(frozen=True, slots=True)
class Violation:
    checker: str
    message: str
    at_ns: int | None  # when it happened, if one event pins it; None for final-state findings


Checker = Callable[[History], list[Violation]]


# -- helpers -----------------------------------------------------------------------------------


def _show(value: bytes | None) -> str:
    if value is None:
        return "null"
    if len(value) <= _SHOWN_BYTES:
        return repr(value)
    return f"{value[:_SHOWN_BYTES]!r}...({len(value)} bytes)"


@dataclass(frozen=True, slots=True)
class _FinalLog:
    """The final leader of one partition and its data records, indexed for lookups."""

    leader: ReplicaState
    values: dict[int, bytes | None]
    offsets: list[int]  # sorted

    def describe(self) -> str:
        return f"leader broker {self.leader.broker} (epoch {self.leader.leader_epoch})"


def _final_logs(history: History) -> dict[TopicPartition, _FinalLog]:
    """Partitions that have a leader at the end, deleted topics left out."""
    deleted = history.deleted_topics
    logs: dict[TopicPartition, _FinalLog] = {}
    for tp in history.final:
        leader = history.final_leader(tp)
        if leader is None or tp.topic in deleted:
            continue
        values = {record.offset: record.value for record in leader.records}
        logs[tp] = _FinalLog(leader, values, sorted(values))
    return logs


def _value_counts(log: _FinalLog) -> Counter[bytes]:
    return Counter(value for value in log.values.values() if value is not None)


# -- the checkers ------------------------------------------------------------------------------


def acknowledged_writes_kept(history: History) -> list[Violation]:
    name = "acknowledged_writes_kept"
    deleted = history.deleted_topics
    logs = _final_logs(history)
    violations: list[Violation] = []
    leaderless: set[TopicPartition] = set()
    for ack in history.acks:
        if ack.acks != ACKS_ALL or ack.tp.topic in deleted:
            continue
        write = f"{ack.producer}'s acks=all write {_show(ack.value)} at offset {ack.offset}"
        log = logs.get(ack.tp)
        if log is None:
            if ack.tp not in leaderless:
                leaderless.add(ack.tp)
                message = f"{ack.tp}: no leader at the end to hold {write} (and any later ones)"
                violations.append(Violation(name, message, ack.at_ns))
            continue
        if 0 <= ack.offset < log.leader.log_start_offset:
            continue
        if ack.offset not in log.values:
            found = "no data record there"
        elif log.values[ack.offset] != ack.value:
            found = _show(log.values[ack.offset])
        elif ack.offset >= log.leader.high_watermark:
            found = f"it, but at or above its high watermark {log.leader.high_watermark}"
        else:
            continue
        message = f"{ack.tp} offset {ack.offset}: {write} was lost: {log.describe()} has {found}"
        violations.append(Violation(name, message, ack.at_ns))
    return violations


def acknowledged_offsets_unique(history: History) -> list[Violation]:
    name = "acknowledged_offsets_unique"
    first: dict[tuple[TopicPartition, int], bytes] = {}
    violations: list[Violation] = []
    for ack in history.acks:
        if ack.acks != ACKS_ALL:
            continue
        earlier = first.setdefault((ack.tp, ack.offset), ack.value)
        if earlier != ack.value:
            message = (
                f"{ack.tp} offset {ack.offset}: acknowledged to {ack.producer} for "
                f"{_show(ack.value)} after it was acknowledged for {_show(earlier)}"
            )
            violations.append(Violation(name, message, ack.at_ns))
    return violations


def acks_all_held_by_min_insync_replicas(history: History) -> list[Violation]:
    name = "acks_all_held_by_min_insync_replicas"
    deleted_at: dict[str, int] = {}
    for deleted in history.topic_deletions:
        deleted_at.setdefault(deleted.topic, deleted.at_ns)
    by_tp: dict[TopicPartition, list[LogEnd]] = {}
    for sample in history.log_ends:
        by_tp.setdefault(sample.tp, []).append(sample)
    holdings: dict[TopicPartition, _Holdings] = {}
    violations: list[Violation] = []
    for ack in history.acks:
        required = history.min_insync_replicas.get(ack.tp.topic)
        if ack.acks != ACKS_ALL or ack.offset < 0 or required is None:
            continue
        if deleted_at.get(ack.tp.topic, ack.at_ns + 1) <= ack.at_ns:
            continue  # answered while its topic was being deleted: its replicas were going
        if ack.tp not in holdings:
            holdings[ack.tp] = _Holdings(by_tp.get(ack.tp, []))
        since = min(history.attempted_at.get(ack.value, 0), ack.at_ns)
        held = holdings[ack.tp].most_holders(ack.offset, since, ack.at_ns, enough=required)
        if len(held) >= required:
            continue
        message = (
            f"{ack.tp} offset {ack.offset}: {ack.producer}'s acks=all write {_show(ack.value)} "
            f"was acknowledged, but at most {len(held)} replica(s) {sorted(held)} held it at "
            f"once between its send ({since} ns) and its answer (min.insync.replicas {required})"
        )
        violations.append(Violation(name, message, ack.at_ns))
    return violations


class _Holdings:
    """One partition's log-end samples, to ask how many replicas held an offset at once."""

    def __init__(self, samples: Sequence[LogEnd]) -> None:
        # The observer appends in time order; sorted again (stably) for hand-built histories.
        self._samples = sorted(samples, key=lambda sample: sample.at_ns)
        self._times = [sample.at_ns for sample in self._samples]
        self._replicas: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        for sample in self._samples:
            times, ends = self._replicas.setdefault((sample.broker, sample.incarnation), ([], []))
            times.append(sample.at_ns)
            ends.append(sample.log_end_offset)

    def most_holders(self, offset: int, since_ns: int, until_ns: int, *, enough: int) -> set[int]:
        """The largest set of brokers whose replicas' logs all reached past `offset` at one
        sample in [`since_ns`, `until_ns`] (the first found of `enough` brokers, if any)."""
        ends: dict[tuple[int, int], int] = {}
        for replica, (times, values) in self._replicas.items():
            at = bisect.bisect_right(times, since_ns) - 1
            ends[replica] = values[at] if at >= 0 else -1
        best = _holders(ends, offset)
        index = bisect.bisect_right(self._times, since_ns)
        while len(best) < enough and index < len(self._times) and self._times[index] <= until_ns:
            stamp = self._times[index]
            while index < len(self._times) and self._times[index] == stamp:
                sample = self._samples[index]
                ends[(sample.broker, sample.incarnation)] = sample.log_end_offset
                index += 1
            held = _holders(ends, offset)
            if len(held) > len(best):
                best = held
        return best


def _holders(ends: dict[tuple[int, int], int], offset: int) -> set[int]:
    # Brokers, not replicas: one broker's incarnations never hold at once (the observer closes
    # an incarnation with -1 before its next one is seen), and a broker counts once anyway.
    return {broker for (broker, _), end in ends.items() if end > offset}


def no_duplicates_from_idempotent_producers(history: History) -> list[Violation]:
    name = "no_duplicates_from_idempotent_producers"
    idempotent = {value for value, is_idempotent in history.attempted.items() if is_idempotent}
    idempotent.update(ack.value for ack in history.acks if ack.idempotent)
    violations: list[Violation] = []
    for tp, log in sorted(_final_logs(history).items()):
        for value, count in sorted(_value_counts(log).items()):
            if count < 2 or value not in idempotent:
                continue
            offsets = [offset for offset in log.offsets if log.values[offset] == value]
            message = (
                f"{tp}: idempotent producer {history.producer_of(value)}'s value {_show(value)} "
                f"is {count} times in the log of {log.describe()}, at offsets {offsets}"
            )
            violations.append(Violation(name, message, None))
    return violations


def duplicate_counts(history: History) -> dict[str, int]:
    """Producer -> extra copies of its values in the final leaders' logs (0 for every producer the
    history knows that has none). For the run summary: duplicates from a non-idempotent producer
    that retried are legal."""
    counts = dict.fromkeys(sorted(history.producers()), 0)
    for log in _final_logs(history).values():
        for value, count in _value_counts(log).items():
            if count > 1:
                producer = history.producer_of(value)
                counts[producer] = counts.get(producer, 0) + count - 1
    return counts


@dataclass(slots=True)
class _ReadRun:
    """One consumer's current run of reads of one partition (a restart begins a new one)."""

    from_offset: int | None  # where the run began, when a restart said so
    last_offset: int | None = None


def reads_match_the_log(history: History) -> list[Violation]:
    name = "reads_match_the_log"
    deleted = history.deleted_topics
    logs = _final_logs(history)
    runs: dict[tuple[str, TopicPartition], _ReadRun] = {}
    leaderless: set[TopicPartition] = set()
    violations: list[Violation] = []
    for event in history.consumer_events:
        key = (event.consumer, event.tp)
        if not isinstance(event, Read):
            runs[key] = _ReadRun(from_offset=event.from_offset)
            continue
        if event.tp.topic in deleted:
            continue
        run = runs.setdefault(key, _ReadRun(from_offset=None))
        log = logs.get(event.tp)
        if log is None:
            if event.tp not in leaderless:
                leaderless.add(event.tp)
                message = f"{event.tp}: no leader at the end to check {event.consumer}'s reads"
                violations.append(Violation(name, message, event.at_ns))
            continue
        problem = _read_problem(event, run, log)
        if problem is not None:
            message = f"{event.tp} offset {event.offset}: {event.consumer} {problem}"
            violations.append(Violation(name, message, event.at_ns))
        run.last_offset = event.offset
    return violations


def _read_problem(read: Read, run: _ReadRun, log: _FinalLog) -> str | None:
    """What is wrong with this read, given the run it continues and the final log; None if
    nothing."""
    if run.last_offset is not None and read.offset <= run.last_offset:
        return f"read it after offset {run.last_offset} with no restart between"
    if run.last_offset is None and run.from_offset is not None and read.offset < run.from_offset:
        return f"read it in a run that restarted from offset {run.from_offset}"
    if read.offset < log.leader.log_start_offset:
        return None
    lower = run.last_offset + 1 if run.last_offset is not None else run.from_offset
    if lower is not None:
        start = bisect.bisect_left(log.offsets, max(lower, log.leader.log_start_offset))
        skipped = log.offsets[start : bisect.bisect_left(log.offsets, read.offset)]
        if skipped:
            shown = ", ".join(map(str, skipped[:5])) + (", ..." if len(skipped) > 5 else "")
            return f"skipped offsets holding data records in the final log ({shown})"
    if read.offset not in log.values:
        return f"read {_show(read.value)} but {log.describe()} has no data record there"
    if log.values[read.offset] != read.value:
        found = _show(log.values[read.offset])
        return f"read {_show(read.value)} but {log.describe()} has {found}"
    if read.offset >= log.leader.high_watermark:
        return f"read it but the final high watermark is {log.leader.high_watermark}"
    return None


def replicas_agree_below_the_high_watermark(history: History) -> list[Violation]:
    name = "replicas_agree_below_the_high_watermark"
    deleted = history.deleted_topics
    violations: list[Violation] = []
    for tp, replicas in sorted(history.final.items()):
        if tp.topic in deleted:
            continue
        problems = _partition_disagreements(
            replicas, history.final_leader(tp), history.final_partition_state(tp)
        )
        violations.extend(Violation(name, f"{tp}: {problem}", None) for problem in problems)
    return violations


def _partition_disagreements(
    replicas: Sequence[ReplicaState], leader: ReplicaState | None, isr: IsrChange | None
) -> list[str]:
    leaders = [replica.broker for replica in replicas if replica.is_leader]
    if leader is None:
        return ["no leader at the end"]
    problems: list[str] = []
    if len(leaders) > 1:
        problems.append(f"brokers {sorted(leaders)} all claim to lead at the end")
    if isr is not None and isr.leader != leader.broker:
        problems.append(f"broker {leader.broker} leads but the controller names {isr.leader}")
    in_isr = set(isr.isr) if isr is not None else set()
    recorded = {replica.broker for replica in replicas}
    problems.extend(
        f"broker {broker} is in the final ISR {sorted(in_isr)} but its replica was not recorded"
        for broker in sorted(in_isr - recorded)
    )
    for replica in replicas:
        if replica is not leader:
            problems.extend(_follower_disagreements(leader, replica, replica.broker in in_isr))
    return problems


def _follower_disagreements(leader: ReplicaState, replica: ReplicaState, in_isr: bool) -> list[str]:
    who = f"broker {replica.broker}"
    ours, theirs = replica.batch_bytes, leader.batch_bytes
    problems: list[str] = []
    if not theirs.startswith(ours):
        pairs = enumerate(zip(ours, theirs, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), len(theirs))  # else ours is longer
        problems.append(
            f"{who}'s batch bytes differ from leader broker {leader.broker}'s at byte {at} "
            f"(below the leader's high watermark {leader.high_watermark})"
        )
    elif in_isr and len(ours) != len(theirs):
        problems.append(
            f"{who} is in the final ISR but has {len(ours)} of the leader's {len(theirs)} "
            f"bytes below the high watermark {leader.high_watermark}"
        )
    if replica.high_watermark > leader.high_watermark:
        problems.append(
            f"{who}'s high watermark {replica.high_watermark} is above leader broker "
            f"{leader.broker}'s {leader.high_watermark}"
        )
    difference = _first_record_difference(leader, replica)
    if difference is not None:
        offset, mine, led = difference
        problems.append(
            f"offset {offset}: {who} has {mine} but leader broker {leader.broker} has {led}"
        )
    return problems


def _first_record_difference(
    leader: ReplicaState, replica: ReplicaState
) -> tuple[int, str, str] | None:
    """The lowest offset below the leader's HW, within both logs, where the data records differ,
    with what the replica and the leader hold there."""
    lower = max(leader.log_start_offset, replica.log_start_offset)
    upper = min(leader.high_watermark, replica.log_end_offset)

    def window(state: ReplicaState) -> dict[int, bytes | None]:
        return {r.offset: r.value for r in state.records if lower <= r.offset < upper}

    mine, led = window(replica), window(leader)
    differing = [
        offset
        for offset in mine.keys() | led.keys()
        if offset not in mine or offset not in led or mine[offset] != led[offset]
    ]
    if not differing:
        return None
    offset = min(differing)
    return offset, _show_record(mine, offset), _show_record(led, offset)


def _show_record(values: dict[int, bytes | None], offset: int) -> str:
    return _show(values[offset]) if offset in values else "no data record"


def high_watermark_monotonic(history: History) -> list[Violation]:
    name = "high_watermark_monotonic"
    last: dict[tuple[int, int, TopicPartition, int], int] = {}
    violations: list[Violation] = []
    for sample in sorted(history.high_watermarks, key=lambda sample: sample.at_ns):
        key = (sample.broker, sample.incarnation, sample.tp, sample.leader_epoch)
        before = last.get(key)
        if before is not None and sample.high_watermark < before:
            message = (
                f"{sample.tp}: broker {sample.broker} (incarnation {sample.incarnation}, leader "
                f"epoch {sample.leader_epoch}) high watermark went back from {before} to "
                f"{sample.high_watermark}"
            )
            violations.append(Violation(name, message, sample.at_ns))
        # Against the previous sample, so one step back is reported once, not at every sample
        # until the HW has climbed back.
        last[key] = sample.high_watermark
    return violations


def one_leader_per_epoch(history: History) -> list[Violation]:
    name = "one_leader_per_epoch"
    first: dict[tuple[TopicPartition, int], int] = {}
    violations: list[Violation] = []
    for claim in history.leader_claims:
        broker = first.setdefault((claim.tp, claim.leader_epoch), claim.broker)
        if broker != claim.broker:
            message = (
                f"{claim.tp} leader epoch {claim.leader_epoch}: broker {claim.broker} "
                f"(incarnation {claim.incarnation}) claims it after broker {broker} did"
            )
            violations.append(Violation(name, message, claim.at_ns))
    return violations


def isr_never_empty(history: History) -> list[Violation]:
    name = "isr_never_empty"
    violations: list[Violation] = []
    for change in history.isr_changes:
        state = f"{change.tp} (leader epoch {change.leader_epoch}, partition epoch "
        state += f"{change.partition_epoch})"
        if not change.isr:
            violations.append(Violation(name, f"{state}: empty ISR", change.at_ns))
        elif change.leader >= 0 and change.leader not in change.isr:
            message = f"{state}: leader {change.leader} is not in the ISR {list(change.isr)}"
            violations.append(Violation(name, message, change.at_ns))
    return violations


def controller_epochs_monotonic(history: History) -> list[Violation]:
    name = "controller_epochs_monotonic"
    violations: list[Violation] = []
    previous: int | None = None
    for sample in sorted(history.controller_epochs, key=lambda sample: sample.at_ns):
        if previous is not None and sample.epoch < previous:
            message = f"controller epoch went back from {previous} to {sample.epoch}"
            violations.append(Violation(name, message, sample.at_ns))
        previous = sample.epoch
    return violations


def committed_offsets_kept(history: History) -> list[Violation]:
    """Every acknowledged offset commit survives: the group's offset read at the end is at least
    the highest one acknowledged, and no higher than the highest one sent (the workload commits
    rising offsets; a commit applied whose answer was lost may be the one that stayed)."""
    name = "committed_offsets_kept"
    acknowledged: dict[tuple[str, TopicPartition], int] = {}
    sent: dict[tuple[str, TopicPartition], int] = {}
    deleted = history.deleted_topics
    for commit in history.offset_commits:
        if commit.tp.topic in deleted:
            continue
        key = (commit.group, commit.tp)
        sent[key] = max(sent.get(key, -1), commit.offset)
        if commit.acknowledged:
            acknowledged[key] = max(acknowledged.get(key, -1), commit.offset)
    violations: list[Violation] = []
    for (group, tp), offset in sorted(acknowledged.items()):
        final = history.final_offsets.get((group, tp), -1)
        if final < offset:
            message = f"group {group} {tp}: commit of {offset} acknowledged, {final} at the end"
            violations.append(Violation(name, message, None))
        elif final > sent[(group, tp)]:
            message = (
                f"group {group} {tp}: {final} at the end, never sent (at most {sent[(group, tp)]})"
            )
            violations.append(Violation(name, message, None))
    return violations


def group_generations_fenced(history: History) -> list[Violation]:
    """A consumer group's generations keep its members apart: one generation gives each
    partition to at most one member, and once any member has been assigned generation g, the
    coordinator accepts no commit of an older generation sent after that (the coordinator
    answered that SyncGroup from generation g, and wrote the group's state durably first, so
    even a coordinator that took over knows g: a commit from before is a zombie's)."""
    name = "group_generations_fenced"
    owners: dict[tuple[str, int, TopicPartition], str] = {}
    first_assigned: dict[str, list[tuple[int, int]]] = {}  # group -> (at_ns, generation)
    violations: list[Violation] = []
    for assignment in history.group_assignments:
        first_assigned.setdefault(assignment.group, []).append(
            (assignment.at_ns, assignment.generation)
        )
        for tp in assignment.partitions:
            key = (assignment.group, assignment.generation, tp)
            owner = owners.setdefault(key, assignment.member)
            if owner != assignment.member:
                message = (
                    f"group {assignment.group} generation {assignment.generation}: {tp} "
                    f"assigned to both {owner} and {assignment.member}"
                )
                violations.append(Violation(name, message, assignment.at_ns))
    newest_by: dict[str, tuple[list[int], list[int]]] = {}  # group -> (times, newest so far)
    for group, assigned in first_assigned.items():
        times: list[int] = []
        newest: list[int] = []
        highest = -1
        for at_ns, generation in sorted(assigned):
            highest = max(highest, generation)
            times.append(at_ns)
            newest.append(highest)
        newest_by[group] = (times, newest)
    sent_at: dict[tuple[str, str, int, TopicPartition, int], int] = {}
    for commit in history.offset_commits:
        if commit.generation < 0:
            continue  # a simple consumer's: no generation to fence
        commit_key = (commit.group, commit.member, commit.generation, commit.tp, commit.offset)
        if not commit.acknowledged:
            sent_at[commit_key] = commit.at_ns
            continue
        times, newest = newest_by.get(commit.group, ([], []))
        sent = sent_at.get(commit_key, commit.at_ns)
        index = bisect.bisect_left(times, sent) - 1  # assignments strictly before the send
        if index >= 0 and newest[index] > commit.generation:
            message = (
                f"group {commit.group} {commit.tp}: commit of {commit.offset} by "
                f"{commit.member} in generation {commit.generation} accepted, though "
                f"generation {newest[index]} had been assigned before it was sent"
            )
            violations.append(Violation(name, message, commit.at_ns))
    return violations


def transactions_all_or_nothing(history: History) -> list[Violation]:
    """Exactly-once through transactions, as a read_committed consumer sees it at the end: a
    transaction whose commit was acknowledged is visible whole, one whose abort was is not
    visible at all, one whose outcome the producer never learned is one or the other, never a
    part; and no transactional value is visible twice."""
    name = "transactions_all_or_nothing"
    visible: Counter[bytes] = Counter(
        value
        for tp, reads in history.committed_reads.items()
        if tp.topic not in history.deleted_topics
        for _, value in reads
        if value is not None
    )
    violations: list[Violation] = []
    for txn in history.transactions:
        seen = [value for value in txn.values if visible[value]]
        whole, none = len(seen) == len(txn.values), not seen
        wrong = (
            (txn.outcome == "committed" and not whole)
            or (txn.outcome == "aborted" and not none)
            or (txn.outcome == "unknown" and not (whole or none))
        )
        if wrong:
            message = (
                f"{txn.producer}'s {txn.outcome} transaction of {len(txn.values)} records: "
                f"{len(seen)} visible to read_committed ({_show(txn.values[0])}...)"
            )
            violations.append(Violation(name, message, txn.at_ns))
    transactional = {value for txn in history.transactions for value in txn.values}
    for value, count in sorted(visible.items()):
        if count > 1 and value in transactional:
            message = f"{_show(value)} visible {count} times to read_committed"
            violations.append(Violation(name, message, None))
    return violations


ALL_CHECKERS: Final[dict[str, Checker]] = {
    checker.__name__: checker
    for checker in (
        acknowledged_writes_kept,
        acknowledged_offsets_unique,
        acks_all_held_by_min_insync_replicas,
        no_duplicates_from_idempotent_producers,
        reads_match_the_log,
        replicas_agree_below_the_high_watermark,
        high_watermark_monotonic,
        one_leader_per_epoch,
        isr_never_empty,
        controller_epochs_monotonic,
        committed_offsets_kept,
        group_generations_fenced,
        transactions_all_or_nothing,
    )
}


def check_all(history: History) -> list[Violation]:
    """Every checker's violations, in `ALL_CHECKERS` order."""
    return [violation for checker in ALL_CHECKERS.values() for violation in checker(history)]


def format_violations(violations: Sequence[Violation], limit: int = 20) -> str:
    """A readable report: one line per violation, at most `limit` of them."""
    if not violations:
        return "no violations"
    lines = [f"{len(violations)} violation(s):"]
    for violation in violations[:limit]:
        when = f" at {violation.at_ns} ns" if violation.at_ns is not None else ""
        lines.append(f"  [{violation.checker}]{when} {violation.message}")
    if len(violations) > limit:
        lines.append(f"  ... and {len(violations) - limit} more")
    return "\n".join(lines)
