"""A history checker for last-write-wins registers: did the cluster keep every write it
acknowledged, and did it invent nothing?

Concurrent clients record every operation they attempted (`Op`): when it was invoked,
when its answer came back (never, for a time-out), its kind, key, value and HTTP status.
After the faults are healed, one quorum read per key gives the final state. `check` is a
pure function of the two.

The rule, per key. An acknowledged write `w` (PUT 201, DELETE 202) survives when the
final state was produced by a write that does not strictly precede `w`: `w` itself, a
write that overlaps it in real time, or one invoked after it (acknowledged or not: a
503, a 504 or a time-out may or may not have taken effect). The final state produced only
by writes that completed before `w` was invoked, or by nothing at all, means `w` was lost.
"Strictly precede" allows for the clock: SPEC.md rule 8.3 promises that a write after a
10 ms pause is newer than any write before it, not that two writes a microsecond apart on
two coordinators are ordered, so `clock_slack` (10 ms) is added to a completion time.

A final value (or a value a GET returned) must be the value of some PUT attempted on that
key; anything else appeared from nowhere. Values are therefore best unique per write.

A GET at quorum answered during the run is held to the same rule as the final read, at
its own time (SPEC.md rule 3.5: "GET 2/3 sees a PUT 2/3 and a DELETE 2/3"): what it
returned must not have been produced only by writes that strictly precede an
acknowledged write completed before the GET was invoked. A stale read says a quorum
answer missed an acknowledged write even if the final state has it back.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# SPEC.md rule 8.3: "a write after a 10 ms pause is newer than any write before it".
CLOCK_SLACK = 0.010
FINAL_READ = "final read"


class Kind(enum.Enum):
    PUT = "PUT"
    DELETE = "DELETE"
    GET = "GET"


_ACKED = {Kind.PUT: 201, Kind.DELETE: 202}


@dataclass(frozen=True, slots=True)
class Op:
    """One attempted client operation. Times are seconds on one monotonic clock.

    `value`: for a PUT the value sent; for a GET answered 200 the value read; else None.
    `status`: the HTTP status, or None when no answer came (time-out, connection lost):
    then `completed` is None too, since the write may take effect at any later time.
    """

    kind: Kind
    key: str
    value: bytes | None
    invoked: float
    completed: float | None
    status: int | None

    @property
    def is_write(self) -> bool:
        return self.kind is not Kind.GET

    @property
    def acknowledged(self) -> bool:
        return self.status == _ACKED.get(self.kind)

    @property
    def settled_by(self) -> float:
        """The latest moment this op can have taken effect (infinity if never answered)."""
        return math.inf if self.completed is None else self.completed


@dataclass(frozen=True, slots=True)
class LostWrite:
    """An acknowledged write that the final state no longer reflects."""

    write: Op
    final: bytes | None

    def __str__(self) -> str:
        what = f"PUT {self.write.value!r}" if self.write.kind is Kind.PUT else "DELETE"
        found = "absent" if self.final is None else repr(self.final)
        return (
            f"{self.write.key!r}: acknowledged {what} "
            f"[{self.write.invoked:.3f}, {self.write.settled_by:.3f}] lost, final {found}"
        )


@dataclass(frozen=True, slots=True)
class Phantom:
    """A value read (finally, or by a GET during the run) that no PUT of that key sent."""

    key: str
    value: bytes
    source: str  # FINAL_READ or "GET at <time>"

    @property
    def in_final_state(self) -> bool:
        return self.source == FINAL_READ

    def __str__(self) -> str:
        return f"{self.key!r}: {self.source} saw {self.value!r}, which was never written"


@dataclass(frozen=True, slots=True)
class StaleRead:
    """A GET that missed an acknowledged write completed before it was invoked."""

    read: Op
    missed: Op

    def __str__(self) -> str:
        seen = "absent" if self.read.value is None else repr(self.read.value)
        what = f"PUT {self.missed.value!r}" if self.missed.kind is Kind.PUT else "DELETE"
        return (
            f"{self.read.key!r}: GET [{self.read.invoked:.3f}, {self.read.settled_by:.3f}] "
            f"saw {seen}, missing the acknowledged {what} "
            f"[{self.missed.invoked:.3f}, {self.missed.settled_by:.3f}]"
        )


@dataclass(frozen=True, slots=True)
class Report:
    ops: int
    writes: int
    acked: int
    unavailable: int  # 503
    not_enough_replicas: int  # 504
    timeouts: int  # no answer at all
    other_failures: int
    lost: tuple[LostWrite, ...]
    phantoms: tuple[Phantom, ...]
    stale_reads: tuple[StaleRead, ...]

    @property
    def ok(self) -> bool:
        return self.final_state_ok and self.reads_ok

    @property
    def final_state_ok(self) -> bool:
        """No acknowledged write lost, no final value from nowhere."""
        return not self.lost and not any(p.in_final_state for p in self.phantoms)

    @property
    def reads_ok(self) -> bool:
        """No GET missed an acknowledged write or returned a value from nowhere."""
        return not self.stale_reads and all(p.in_final_state for p in self.phantoms)

    def summary(self) -> str:
        return (
            f"ops={self.ops} writes={self.writes} acked={self.acked} "
            f"503={self.unavailable} 504={self.not_enough_replicas} "
            f"timeouts={self.timeouts} other_failures={self.other_failures} "
            f"lost={len(self.lost)} phantoms={len(self.phantoms)} "
            f"stale_reads={len(self.stale_reads)}"
        )

    def details(self, limit: int = 20) -> str:
        problems = [str(item) for item in (*self.lost, *self.phantoms, *self.stale_reads)]
        more = len(problems) - limit
        return "\n".join(problems[:limit] + ([f"... and {more} more"] if more > 0 else []))


class KeyHistory:
    """The writes of one key, indexed to answer "what could have produced this state,
    and by when" and "which acknowledged write had completed by then"."""

    def __init__(self, writes: Iterable[Op]) -> None:
        self._puts: dict[bytes, list[Op]] = defaultdict(list)
        self._deletes: list[Op] = []
        self.acked: list[Op] = []
        for op in writes:
            if op.kind is Kind.PUT and op.value is not None:
                self._puts[op.value].append(op)
            elif op.kind is Kind.DELETE:
                self._deletes.append(op)
            if op.acknowledged:
                self.acked.append(op)
        self.acked.sort(key=lambda op: op.settled_by)
        self._acked_completions = [op.settled_by for op in self.acked]
        # Running maximum of invoke times, so "the latest-invoked acknowledged write
        # completed by time t" is one bisection.
        self._latest_acked: list[int] = []
        for index, op in enumerate(self.acked):
            best = self._latest_acked[-1] if self._latest_acked else index
            self._latest_acked.append(index if op.invoked >= self.acked[best].invoked else best)

    def producers(self, state: bytes | None) -> list[Op]:
        """The writes that, applied last, leave `state` (None: absent)."""
        return self._deletes if state is None else self._puts.get(state, [])

    def produced_by(self, state: bytes | None, invoked_by: float = math.inf) -> float:
        """The latest moment a write invoked by `invoked_by` that leaves `state` can have
        taken effect; -inf when none (the initial absent state, older than any write)."""
        return max(
            (op.settled_by for op in self.producers(state) if op.invoked <= invoked_by),
            default=-math.inf,
        )

    def latest_acked_by(self, moment: float) -> Op | None:
        """Among acknowledged writes completed by `moment`, the one invoked last."""
        count = bisect.bisect_right(self._acked_completions, moment)
        return self.acked[self._latest_acked[count - 1]] if count else None


def check(
    history: Sequence[Op],
    final: Mapping[str, bytes | None],
    clock_slack: float = CLOCK_SLACK,
) -> Report:
    """Checks `history` against `final` (key -> value, None when the read found nothing).

    Raises ValueError if a key the history wrote has no final state: a missing read must
    not pass for a kept write."""
    writes_by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        if op.is_write:
            writes_by_key[op.key].append(op)
    missing = sorted(set(writes_by_key) - set(final))
    if missing:
        raise ValueError(f"no final state for written keys {missing[:10]}")
    keys = {key: KeyHistory(writes_by_key.get(key, ())) for key in {*writes_by_key, *final}}

    lost: list[LostWrite] = []
    phantoms: list[Phantom] = []
    for key, state in final.items():
        if state is not None and not keys[key].producers(state):
            phantoms.append(Phantom(key, state, FINAL_READ))
        produced = keys[key].produced_by(state)
        lost += [
            LostWrite(op, state) for op in keys[key].acked if produced + clock_slack <= op.invoked
        ]
    stale_reads: list[StaleRead] = []
    for op in history:
        if op.kind is not Kind.GET or op.status not in (200, 404):
            continue
        index = keys.get(op.key) or KeyHistory(())
        if op.status == 200 and not index.producers(op.value):
            phantoms.append(Phantom(op.key, op.value or b"", f"GET at {op.invoked:.3f}"))
        elif (stale := _stale(op, index, clock_slack)) is not None:
            stale_reads.append(stale)

    statuses = [op.status for op in history]
    return Report(
        ops=len(history),
        writes=sum(len(writes) for writes in writes_by_key.values()),
        acked=sum(op.acknowledged for op in history),
        unavailable=statuses.count(503),
        not_enough_replicas=statuses.count(504),
        timeouts=statuses.count(None),
        other_failures=sum(
            op.status not in (None, 503, 504) and not op.acknowledged
            for op in history
            if op.is_write
        ),
        lost=tuple(lost),
        phantoms=tuple(phantoms),
        stale_reads=tuple(stale_reads),
    )


def _stale(read: Op, index: KeyHistory, clock_slack: float) -> StaleRead | None:
    """The acknowledged write `read` (a GET answered 200 or 404) should have seen and
    did not, if any: one completed before the read was invoked and invoked after every
    write that could have produced what the read returned had taken effect."""
    state = read.value if read.status == 200 else None
    missed = index.latest_acked_by(read.invoked - clock_slack)
    produced = index.produced_by(state, invoked_by=read.settled_by)
    if missed is not None and produced + clock_slack <= missed.invoked:
        return StaleRead(read, missed)
    return None
