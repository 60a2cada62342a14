"""A linearizability checker for single-key registers: is there one order of the
operations of each key, every operation placed at one moment between its invocation and
its answer, in which every GET reads what the PUT or DELETE before it left?

This asks more than `dht.history.checker.check`, which asks whether acknowledged writes
survive and reads are not stale under last-write-wins. Linearizability also fails
histories that checker passes, say three reads after two concurrent PUTs that see a,
then b, then a again: each read alone is explained, no single order explains all three.

The register. A key starts absent (a GET answers 404). A PUT sets its value, a DELETE
makes it absent, a GET answered 200 reads its value and one answered 404 reads it
absent. Which operations count, and where they may be placed, is `standing`'s rule.
Keys are judged apart: a history is linearizable if and only if the history of each key
is (Herlihy and Wing's locality, P-compositionality in Porcupine's words), and a search
over one key's operations is far smaller than one over all of them.

The search is Wing and Gong's, with Lowe's cache (WGL), as Porcupine's checker.go and
Knossos's `wgl` checker run it. Each operation gives a call entry at its invocation and
a return entry at its answer, in one list sorted by time (a call before a return at the
same moment: they overlap). The search walks the list from its head: at a call, it
tries to place that operation next (a GET only if it reads the register's current
state); at the return of an operation not yet placed, this branch has failed, and it
backtracks to its last choice and tries the call after it. Placing an operation lifts
its two entries out of the list (dancing links), and backtracking puts them back. It
succeeds once every operation that must be placed is.

An indeterminate write has no return (Jepsen's :info): it may take effect at any moment
after its invocation, even after its answer (a dht write answered 504 reached some
replicas, and hints and repair carry it on), or never. Three rules, each shown safe
where it is applied, keep such writes (and reads) from multiplying the orders to try:
a read that fits the current state is placed at once, and nothing else is tried there
(`_KeySearch._look`); an indeterminate write is placed only right before a read of the
state it leaves (`_KeySearch._read_follows`), and of several that leave one state, only
the one whose return comes first; and its return is set at the last answer of a read
of that state.

The cache keys on the set of operations decided so far (placed or left out) and the
register's state: those two fix all the rest of the search can do (which entries are
still in the list, which reads can be placed next), so a pair seen before, reached by
another order of the same operations, is a branch already searched, and failed. Values
no read saw count as one state, since nothing after tells them apart. Without the cache
the search is exponential in the concurrency. The set is kept as two bitsets: one with
bits numbered by return time, so that the decided set is nearly always a run of ones
from bit 0 and a few bits above it (the cache stores the run's length and the bits
above, a few bytes, not a bitset as long as the history); and one for the few ops
whose call comes long before their return (a slow request, an indeterminate write),
which, placed early, would leave a long gap in the first.

Measured on generated histories of 5,000 ops on one key: one that is linearizable takes
a tenth of a second (5 or 10 clients); one read of a value never written, halfway,
takes about a second and 70,000 states from 5 clients, 5 to 10 s and 500,000 to 700,000
states from 10: the search must rule out every order of the ops before that read. It is
bounded by a time budget (the clock is passed in) and by a number of cached states per
key; a key past either is UNKNOWN, never a hang.
"""

from __future__ import annotations

import enum
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dht.history.classification import indeterminate
from dht.history.operation import Kind, Op

DEFAULT_TIME_BUDGET = 10.0  # seconds for the whole history
# Cached states per key: about 160 bytes each (measured), so up to 160 MB.
DEFAULT_MAX_STATES = 1_000_000
# An op whose call comes more than this many returns before its own return has its bit
# apart from the others' (see the module's docstring).
_LONG_SPAN = 64
# How many search steps pass between two looks at the clock.
_STEPS_PER_CLOCK_READ = 1024
# How the search took a step: chose a write, placed a read that had to be placed, or left
# an indeterminate write out at its answer.
_CHOSEN, _FORCED, _LEFT_OUT = 1, 2, 3
# How many operations of a witness's order `KeyVerdict.details` shows.
_SHOWN_ORDER = 5


class Verdict(enum.Enum):
    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not linearizable"
    UNKNOWN = "unknown"


class Standing(enum.Enum):
    """What the search does with one operation."""

    PLACED = "placed"  # somewhere between its invocation and its answer
    OPTIONAL = "optional"  # anywhere after its invocation, or never
    DROPPED = "dropped"  # it constrains nothing


def standing(op: Op) -> Standing:
    """The one rule for which operations count, the history checker's and SPEC.md's
    (section 14): an acknowledged write (PUT 201, DELETE 202) and a GET answered 200 or
    404 took effect between invocation and answer. A write with no answer or a 5xx (503
    overloaded, 504 not enough replicas, 507 out of space, 500) is indeterminate
    (`classification.indeterminate`): it may have taken effect or not, and if it did,
    then at any moment after its invocation, its answer included: a 504 means too few
    replicas acknowledged in time, not that none took the write, and those that did
    pass it on. Any other answer to a write (400, 413) refused
    it before anything was stored, so it is dropped, where the checker still lets it
    explain a value read; a GET answered anything else, or not at all, read nothing."""
    if op.kind is Kind.GET:
        return Standing.PLACED if op.status in (200, 404) else Standing.DROPPED
    if op.acknowledged:
        return Standing.PLACED
    return Standing.OPTIONAL if indeterminate(op) else Standing.DROPPED


def _state_of(op: Op) -> bytes | None:
    """The register's state a write leaves, or the one a read saw (None: absent)."""
    if op.kind is Kind.DELETE or (op.kind is Kind.GET and op.status == 404):
        return None
    return op.value or b""


def _shown(state: bytes | None) -> str:
    return "absent" if state is None else repr(state)


def _described(op: Op) -> str:
    """An operation as a tester reads it: what, when, through which node, its answer."""
    if op.kind is Kind.GET:
        through = "" if op.node is None else f" through {op.node}"
        return f"GET [{op.invoked:.3f}, {op.settled_by:.3f}]{through} saw {_shown(_state_of(op))}"
    if op.acknowledged:
        return f"acknowledged {op.describe()}"
    answer = "no answer" if op.status is None else f"answered {op.status}"
    return f"{op.describe()} ({answer})"


@dataclass(frozen=True, slots=True)
class Witness:
    """Why a key is not linearizable: the longest order of its operations the search
    found (`placed`, leaving the register at `state`), and the operation it could then
    not place before that operation's answer came (`stuck`)."""

    placed: tuple[Op, ...]
    stuck: Op
    state: bytes | None

    def __str__(self) -> str:
        if self.placed:
            found = (
                f"the longest order found places {len(self.placed)} ops, the last "
                f"{_described(self.placed[-1])}, and leaves {_shown(self.state)}"
            )
        else:
            found = "no op can be placed before it, and the key starts absent"
        if self.stuck.kind is Kind.GET:
            why = f"no order of the ops before its answer leaves {_shown(_state_of(self.stuck))}"
        else:
            why = "every place for it before its answer contradicts a read"
        return f"{_described(self.stuck)} cannot be placed: {found}; {why}"


@dataclass(frozen=True, slots=True)
class KeyVerdict:
    """One key's verdict: the operations judged (`ops`, of which `indeterminate` may be
    left out), the states the search cached, and why it failed (`witness`) or was
    undecided (`reason`)."""

    key: str
    verdict: Verdict
    ops: int
    indeterminate: int
    states: int
    witness: Witness | None = None
    reason: str = ""

    def __str__(self) -> str:
        found = f"{self.key!r}: {self.verdict.value} ({self.ops} ops, {self.states} states)"
        if self.witness is not None:
            return f"{found}: {self.witness}"
        return f"{found}: {self.reason}" if self.reason else found

    def details(self) -> str:
        """`str(self)`, then for a witness the end of the order it found, one op a line."""
        lines = [str(self)]
        if self.witness is not None and self.witness.placed:
            placed = self.witness.placed
            shown = placed[-_SHOWN_ORDER:]
            lines.append(f"  the end of the longest order found ({len(placed)} ops):")
            first = len(placed) - len(shown) + 1
            lines += [f"  {first + n}. {_described(op)}" for n, op in enumerate(shown)]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class LinearizabilityReport:
    """Every key's verdict (by key), and the operations `standing` dropped."""

    keys: tuple[KeyVerdict, ...]
    dropped: int

    @property
    def verdict(self) -> Verdict:
        """NOT_LINEARIZABLE if any key is not, LINEARIZABLE if every key is (an empty
        history too), else UNKNOWN."""
        verdicts = {key.verdict for key in self.keys}
        if Verdict.NOT_LINEARIZABLE in verdicts:
            return Verdict.NOT_LINEARIZABLE
        return Verdict.UNKNOWN if Verdict.UNKNOWN in verdicts else Verdict.LINEARIZABLE

    @property
    def ok(self) -> bool:
        """Proven linearizable: UNKNOWN is not ok, as nothing was proven."""
        return self.verdict is Verdict.LINEARIZABLE

    def of(self, verdict: Verdict) -> list[KeyVerdict]:
        return [key for key in self.keys if key.verdict is verdict]

    def line(self) -> str:
        """`not linearizable: keys=3 linearizable=1 not_linearizable=1 unknown=1 ops=40
        indeterminate=2 dropped=5`"""
        counts = " ".join(
            f"{verdict.value.replace(' ', '_')}={len(self.of(verdict))}" for verdict in Verdict
        )
        return (
            f"{self.verdict.value}: keys={len(self.keys)} {counts} "
            f"ops={sum(key.ops for key in self.keys)} "
            f"indeterminate={sum(key.indeterminate for key in self.keys)} dropped={self.dropped}"
        )

    def details(self, limit: int = 20) -> str:
        """The keys that are not linearizable, each with its witness, then the undecided
        ones with why; at most `limit` keys."""
        shown = self.of(Verdict.NOT_LINEARIZABLE) + self.of(Verdict.UNKNOWN)
        more = len(shown) - limit
        lines = [key.details() for key in shown[:limit]]
        return "\n".join(lines + ([f"... and {more} more keys"] if more > 0 else []))


def check_linearizable(
    ops: Sequence[Op],
    time_budget: float = DEFAULT_TIME_BUDGET,
    max_states: int = DEFAULT_MAX_STATES,
    clock: Callable[[], float] = time.monotonic,
    clock_slack: float = 0.0,
) -> LinearizabilityReport:
    """Judges each key of `ops` (any keys, any order) as a register.

    `time_budget`: seconds of `clock` for the whole history; a key whose search has not
    ended by then, or that was not reached, is UNKNOWN. Keys are searched fewest ops
    first, so that a long key uses up the budget last. `max_states`: cached states per
    key before that key is UNKNOWN.

    `clock_slack`: seconds added to every answer time. 0 judges linearizability as
    defined; `checker.CLOCK_SLACK` judges by SPEC.md rule 8.3, which orders two writes
    only when one began 10 ms after the other had been answered.

    A key with an expiring PUT (`ttl`) is UNKNOWN: the register here never expires."""
    deadline = clock() + time_budget
    by_key: dict[str, list[Op]] = defaultdict(list)
    dropped = 0
    for op in ops:
        if standing(op) is Standing.DROPPED:
            dropped += 1
        else:
            by_key[op.key].append(op)
    verdicts = []
    for key, key_ops in sorted(by_key.items(), key=lambda item: (len(item[1]), item[0])):
        if any(op.ttl is not None for op in key_ops):
            reason = "it has expiring PUTs (ttl), which this register model has no place for"
            verdicts.append(_undecided(key, key_ops, reason))
        elif clock() > deadline:
            reason = f"not searched: the time budget of {time_budget:g} s had run out"
            verdicts.append(_undecided(key, key_ops, reason))
        else:
            search = _KeySearch(key, key_ops, clock_slack)
            verdicts.append(search.run(clock, deadline, time_budget, max_states))
    return LinearizabilityReport(tuple(sorted(verdicts, key=lambda v: v.key)), dropped)


def _undecided(key: str, ops: list[Op], reason: str) -> KeyVerdict:
    optional = sum(standing(op) is Standing.OPTIONAL for op in ops)
    return KeyVerdict(key, Verdict.UNKNOWN, len(ops), optional, 0, reason=reason)


class _KeySearch:
    """The WGL search over one key's operations (none of them DROPPED)."""

    def __init__(self, key: str, ops: list[Op], clock_slack: float) -> None:
        self.key = key
        self.judged = len(ops)
        self.optional = sum(standing(op) is Standing.OPTIONAL for op in ops)
        # An indeterminate write placed after every read that saw the state it leaves
        # could only hide a state from reads until the next write, never explain one:
        # leaving it out does as well. So its return comes at the latest answer to such
        # a read if that is before its own, and one no read could use is left out now.
        read_until: dict[bytes | None, float] = {}
        for op in ops:
            if op.kind is Kind.GET:
                seen = _state_of(op)
                read_until[seen] = max(read_until.get(seen, -math.inf), op.settled_by)
        returns = {
            id(op): op.settled_by
            if standing(op) is Standing.PLACED
            else read_until.get(_state_of(op), -math.inf)
            for op in ops
        }
        self.ops = sorted(
            (op for op in ops if returns[id(op)] >= op.invoked),
            key=lambda op: (returns[id(op)], op.invoked),
        )
        self.required = [standing(op) is Standing.PLACED for op in self.ops]
        # States by number: absent is 0, and the values no read saw share one number, as
        # nothing that comes after tells them apart (no read can be placed at them).
        state_ids: dict[bytes | None, int] = {None: 0}
        for state in read_until:
            state_ids.setdefault(state, len(state_ids))
        unseen = len(state_ids)
        self.state = [state_ids.get(_state_of(op), unseen) for op in self.ops]
        self.writes = [op.is_write for op in self.ops]

        # Entries 1..n in time order, between a head (0) and a tail (n + 1): a call
        # before a return at the same moment (they overlap), and an indeterminate write's
        # return after the others' (so that the reads it may serve are placed by then).
        timed = [(op.invoked, 0, index) for index, op in enumerate(self.ops)]
        timed += [
            (returns[id(op)] + clock_slack, 1 if self.required[index] else 2, index)
            for index, op in enumerate(self.ops)
            if returns[id(op)] < math.inf
        ]
        timed.sort()
        size = len(timed) + 2
        self.tail = size - 1
        self.next = list(range(1, size + 1))
        self.prev = list(range(-1, size - 1))
        self.op_of = [-1] * size
        self.is_call = [False] * size
        self.partner = [-1] * size  # a call's return entry and a return's call, or -1
        call_entry: dict[int, int] = {}
        returns_before = [0] * len(self.ops)  # returns before each op's call
        passed = 0
        for entry, (_, is_return, index) in enumerate(timed, start=1):
            self.op_of[entry] = index
            self.is_call[entry] = not is_return
            if is_return:
                passed += 1
                self.partner[entry] = call_entry[index]
                self.partner[call_entry[index]] = entry
            else:
                call_entry[index] = entry
                returns_before[index] = passed

        # Each op's bit, in one of two sets (see the module's docstring): ops numbered by
        # return time (an op's index is its return's rank) in `short`, and in `long` the
        # few whose call comes more than _LONG_SPAN returns before their own.
        self.long = [index - returns_before[index] > _LONG_SPAN for index in range(len(self.ops))]
        numbers = {True: 0, False: 0}
        self.bit = []
        for index in range(len(self.ops)):
            self.bit.append(1 << numbers[self.long[index]])
            numbers[self.long[index]] += 1

    def _lift(self, call: int) -> None:
        """Takes a call and its return out of the list; each keeps its own links, so
        `_unlift` puts them back (in the reverse order)."""
        for entry in (call, self.partner[call]):
            if entry != -1:
                self.next[self.prev[entry]] = self.next[entry]
                self.prev[self.next[entry]] = self.prev[entry]

    def _unlift(self, call: int) -> None:
        for entry in (self.partner[call], call):
            if entry != -1:
                self.next[self.prev[entry]] = entry
                self.prev[self.next[entry]] = entry

    def _look(self, state: int | None) -> tuple[int, dict[int, int]]:
        """Over the ops that can be placed next (the calls before the list's first
        return): the call entry of a read of `state`, or 0; and, when there is none, for
        each state, the indeterminate write that leaves it and must be placed soonest.

        Placing that read now is never wrong: whatever order places it later, at the
        same state, placing it now instead keeps every read's state and every real-time
        order (nothing answered before its call is left to place), so the search tries
        nothing else there. Placing another indeterminate write that leaves the same
        state as the soonest one is never needed either: exchanged with it, an order
        that places the other now places the soonest now and the other in its place,
        or not at all."""
        first: dict[int, int] = {}
        entry = self.next[0]
        while self.is_call[entry]:
            index = self.op_of[entry]
            if self.writes[index]:
                if not self.required[index]:  # indexes grow with return time
                    first[self.state[index]] = min(index, first.get(self.state[index], index))
            elif self.state[index] == state:
                return entry, first
            entry = self.next[entry]
        return 0, first

    def _read_follows(self, write: int) -> bool:
        """Whether, once indeterminate `write` is placed, a read of the state it leaves
        can be placed right after it: a read whose call comes before the return of every
        op that must be placed (an indeterminate one's return is passed by leaving it
        out). If not, placing `write` now is never needed: in an order that places it
        now, the op after it is a write or none, so it hides a state from no read and
        explains none, and leaving it out does as well."""
        state = self.state[write]
        entry = self.next[0]
        while entry != self.tail:
            index = self.op_of[entry]
            if self.is_call[entry]:
                if not self.writes[index] and self.state[index] == state:
                    return True
            elif self.required[index]:
                return False
            entry = self.next[entry]
        return False

    def run(
        self, clock: Callable[[], float], deadline: float, budget: float, max_states: int
    ) -> KeyVerdict:
        required_left = sum(self.required)
        # The ops placed or left out, as two bitsets (by `self.long`, with `self.bit`);
        # the register's state.
        short, long, state = 0, 0, 0
        cache: set[tuple[int, int, int, int]] = set()
        # (call entry, state before, how: _CHOSEN, _FORCED, or _LEFT_OUT at its return)
        stack: list[tuple[int, int, int]] = []
        order: list[int] = []  # the ops placed, in order
        best: tuple[list[int], int] | None = None  # the longest order, the op stuck after it
        entry = self.next[0]  # where the walk over the ops that can be placed next is
        fresh = True  # the list or the state changed: look for a waiting read first
        first: dict[int, int] | None = None  # `_look`'s, while the list stays
        steps = 0

        def finish(verdict: Verdict, reason: str = "") -> KeyVerdict:
            witness = None
            if verdict is Verdict.NOT_LINEARIZABLE and best is not None:
                placed, stuck = best
                ops = tuple(self.ops[index] for index in placed)
                last_write = next((op for op in reversed(ops) if op.is_write), None)
                at = None if last_write is None else _state_of(last_write)
                witness = Witness(ops, self.ops[stuck], at)
            return KeyVerdict(
                self.key, verdict, self.judged, self.optional, len(cache), witness, reason
            )

        while required_left:
            steps += 1
            if steps % _STEPS_PER_CLOCK_READ == 0 and clock() > deadline:
                return finish(Verdict.UNKNOWN, f"the time budget of {budget:g} s ran out")
            move, how, after = 0, _CHOSEN, state
            if fresh:
                fresh = False
                move, first = self._look(state)
                how = _FORCED if move else _CHOSEN
            if not move:
                assert entry != self.tail, "a required op's return is still in the list"
                index = self.op_of[entry]
                if not self.is_call[entry]:
                    if not self.required[index]:
                        # An indeterminate write's answer came and it was not placed: it
                        # never took effect. The writes before this entry were tried with
                        # it pending, which allows all that leaving it out does, so the
                        # walk goes on after it.
                        move, how = self.partner[entry], _LEFT_OUT
                    elif best is None or len(order) > len(best[0]):
                        best = (list(order), index)
                elif self.writes[index]:
                    if first is None:
                        first = self._look(None)[1]
                    if self.required[index] or (
                        first[self.state[index]] == index and self._read_follows(index)
                    ):
                        move, after = entry, self.state[index]
                    entry = self.next[entry]
                    if not move:
                        continue
                else:
                    entry = self.next[entry]  # a read of another state
                    continue
            if move:
                index = self.op_of[move]
                if self.long[index]:
                    known = _cache_key(short, long | self.bit[index], after)
                else:
                    known = _cache_key(short | self.bit[index], long, after)
                if known not in cache:
                    cache.add(known)
                    if len(cache) > max_states:
                        return finish(Verdict.UNKNOWN, f"more than {max_states} states to search")
                    stack.append((move, state, how))
                    if self.long[index]:
                        long |= self.bit[index]
                    else:
                        short |= self.bit[index]
                    state = after
                    self._lift(move)
                    fresh, first = True, None
                    if how == _LEFT_OUT:
                        entry = self.next[self.partner[move]]
                    else:
                        order.append(index)
                        required_left -= self.required[index]
                        entry = self.next[0]
                    continue
                if how == _CHOSEN:
                    continue  # the walk goes on to the next candidate
            # A dead end. Back to the last choice, to try the candidate after it; a forced
            # read or an op left out at its answer had no other choice.
            while True:
                if not stack:
                    return finish(Verdict.NOT_LINEARIZABLE)
                call, state, how = stack.pop()
                undone = self.op_of[call]
                if self.long[undone]:
                    long ^= self.bit[undone]
                else:
                    short ^= self.bit[undone]
                self._unlift(call)
                if how != _LEFT_OUT:
                    order.pop()
                    required_left += self.required[undone]
                if how == _CHOSEN:
                    entry, first = self.next[call], None
                    break
        return finish(Verdict.LINEARIZABLE)


def _cache_key(short: int, long: int, state: int) -> tuple[int, int, int, int]:
    """`short` as the length of its run of ones from bit 0 and the bits above it, which
    stay few (see the module's docstring), with `long` and the register's state."""
    ones = (short ^ (short + 1)).bit_length() - 1
    return ones, short >> ones, long, state
