"""A history checker for last-write-wins registers with deletes and expiring writes: did
the cluster keep every write it acknowledged, bring back nothing it deleted or let
expire, and invent nothing?

Concurrent clients record every operation they attempted (`Op`): when it was invoked,
when its answer came back (never, for a time-out), its kind, key, value, `ttl` (a PUT
with `ttl=SECONDS`, SPEC.md rule 8.6) and HTTP status. After the faults are healed, the
final state is observed once per key (a quorum read, or the replicas' converged
records), within a known window of time. `check` is a pure function of the two.

The rule, per key. An acknowledged write `w` (PUT 201, DELETE 202) survives when the
final state was produced by a write that does not strictly precede `w`: `w` itself, a
write that overlaps it in real time, or one invoked after it (acknowledged or not: a
503, a 504 or a time-out may or may not have taken effect). The final state produced only
by writes that completed before `w` was invoked, or by nothing at all, means `w` was
violated. "Strictly precede" allows for the clock: SPEC.md rule 8.3 promises that a write
after a 10 ms pause is newer than any write before it, not that two writes a microsecond
apart on two coordinators are ordered, so `clock_slack` (10 ms) is added to a completion
time.

Expiry. A PUT with a ttl produces its value until it expires and the absent state from
then on (as a DELETE would, at the PUT's own place in the order: an expired write does
not bring back the value it overwrote). It expires `ttl` seconds after the coordinator's
clock at the write, which is somewhere between the PUT's invocation and its completion;
the same `clock_slack` widens that window, so an observation within it may find the
value or not. So its value seen by an observation that began at or after
`completed + ttl + clock_slack` comes from an expired write, and the absent state is
produced by it only for an observation that ended after `invoked + ttl - clock_slack`.

Two ways to fail, told apart:
- lost: an acknowledged PUT that must still be visible (no ttl, or one not yet expired)
  is missing from the final state: absent, or an older value there instead;
- resurrected: a value that must be dead is seen, in the final state or by a GET: the
  key holds an older value after an acknowledged DELETE or an acknowledged PUT that has
  since expired, or a value is seen after its own expiry.

A final value (or a value a GET returned) must be the value of some PUT attempted on that
key; anything else appeared from nowhere (a phantom). Values are therefore best unique
per write.

A GET at quorum answered during the run is held to the same rule as the final read, at
its own time (SPEC.md rule 3.5: "GET 2/3 sees a PUT 2/3 and a DELETE 2/3"): what it
returned must not have been produced only by writes that strictly precede an
acknowledged write completed before the GET was invoked. A GET that misses a value that
must be visible is a stale read; one that sees a value that must be dead is a
resurrection. Only writes whose quorums its own meets count (`overlaps`, from the
`replicas` each was sent with: a GET at 1/3 need not see a PUT at 2/3, SPEC.md rule
3.5 asks for A_read + A_write > F); by default every GET meets every write, as quorum
reads and writes at one `replicas` do. Any GET is still held to inventing nothing and to
a value's own expiry.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from dht.history.operation import AFTER_EVERYTHING, Kind, Op, Window
from dht.history.verdict import (
    FINAL_READ,
    LostWrite,
    Phantom,
    Report,
    Resurrection,
    StaleRead,
    read_source,
)

# The operation model and the verdicts, importable from here as from their own modules.
__all__ = [
    "AFTER_EVERYTHING",
    "CLOCK_SLACK",
    "FINAL_READ",
    "KeyHistory",
    "Kind",
    "LostWrite",
    "Op",
    "Overlaps",
    "Phantom",
    "Report",
    "Resurrection",
    "StaleRead",
    "Window",
    "check",
]

# SPEC.md rule 8.3: "a write after a 10 ms pause is newer than any write before it".
CLOCK_SLACK = 0.010

# Whether a GET sent with the first `replicas` (None: the default) must see a write
# acknowledged with the second: their quorums meet (SPEC.md rule 3.5).
Overlaps = Callable[[str | None, str | None], bool]


class AckedWrites:
    """Acknowledged writes by completion, indexed to answer "which one, completed by
    time t, was invoked last" with one bisection."""

    def __init__(self, acked: Iterable[Op]) -> None:
        self.ops = sorted(acked, key=lambda op: op.settled_by)
        self._completions = [op.settled_by for op in self.ops]
        # Running maximum of invoke times.
        self._latest: list[int] = []
        for index, op in enumerate(self.ops):
            best = self._latest[-1] if self._latest else index
            self._latest.append(index if op.invoked >= self.ops[best].invoked else best)

    def latest_by(self, moment: float) -> Op | None:
        """Among those completed by `moment`, the one invoked last."""
        count = bisect.bisect_right(self._completions, moment)
        return self.ops[self._latest[count - 1]] if count else None


class KeyHistory:
    """The writes of one key, indexed to answer "what could have produced this state,
    seen in this window, and by when" and "which acknowledged write had completed by
    then"."""

    def __init__(self, writes: Iterable[Op], clock_slack: float = CLOCK_SLACK) -> None:
        self._slack = clock_slack
        self._puts: dict[bytes, list[Op]] = defaultdict(list)
        self._deletes: list[Op] = []
        self._expiring: list[Op] = []
        self.acked: list[Op] = []
        for op in writes:
            if op.kind is Kind.PUT and op.value is not None:
                self._puts[op.value].append(op)
                if op.ttl is not None:
                    self._expiring.append(op)
            elif op.kind is Kind.DELETE:
                self._deletes.append(op)
            if op.acknowledged:
                self.acked.append(op)
        self._acked = AckedWrites(self.acked)
        self.acked = self._acked.ops
        # The acknowledged writes a GET sent with some `replicas` must see, by it.
        self._acked_for: dict[str | None, AckedWrites] = {}
        # What `produced_by` asks of the absent state, in O(log n) rather than a pass
        # over every DELETE and expiring PUT of the key for every read that found it
        # absent: the DELETEs by invoke time with a running latest settle, and the
        # expiring PUTs by earliest expiry with the one that settled latest so far.
        self._deletes.sort(key=lambda op: op.invoked)
        self._delete_invokes = [op.invoked for op in self._deletes]
        self._delete_settled: list[float] = []
        for op in self._deletes:
            settled = (
                max(self._delete_settled[-1], op.settled_by)
                if self._delete_settled
                else op.settled_by
            )
            self._delete_settled.append(settled)
        self._expiring.sort(key=lambda op: op.expires_after)
        self._expiries = [op.expires_after for op in self._expiring]
        self._latest_expiring: list[Op] = []
        for op in self._expiring:
            latest = self._latest_expiring[-1] if self._latest_expiring else op
            self._latest_expiring.append(op if op.settled_by >= latest.settled_by else latest)

    def sent(self, value: bytes) -> bool:
        """Whether some PUT of this key sent `value`."""
        return bool(self._puts.get(value))

    def dead_at(self, write: Op, seen: Window) -> bool:
        """Whether `write` leaves the key absent for an observation in `seen`: a DELETE,
        or an expiring PUT certainly expired before the observation began."""
        if write.kind is Kind.DELETE:
            return True
        return write.ttl is not None and seen[0] >= write.expired_by + self._slack

    def producers(self, state: bytes | None, seen: Window = AFTER_EVERYTHING) -> list[Op]:
        """The writes that, applied last, leave `state` (None: absent) for an observation
        made between `seen[0]` and `seen[1]`: for a value, its PUTs not certainly expired
        when the observation began; for absent, the DELETEs and the expiring PUTs that
        may have expired before it ended."""
        since, until = seen
        if state is None:
            expired = [op for op in self._expiring if op.expires_after < until + self._slack]
            return self._deletes + expired
        return [
            op
            for op in self._puts.get(state, [])
            if op.ttl is None or since < op.expired_by + self._slack
        ]

    def produced_by(
        self, state: bytes | None, seen: Window = AFTER_EVERYTHING, invoked_by: float = math.inf
    ) -> float:
        """The latest moment a write invoked by `invoked_by` that leaves `state` (seen in
        `seen`) can have taken effect; -inf when none (the initial absent state, older
        than any write)."""
        if state is None:
            return self._absence_produced_by(seen[1], invoked_by)
        return max(
            (op.settled_by for op in self.producers(state, seen) if op.invoked <= invoked_by),
            default=-math.inf,
        )

    def _absence_produced_by(self, until: float, invoked_by: float) -> float:
        """`produced_by` for the absent state, from the indexes: the DELETEs invoked by
        `invoked_by`, and the expiring PUTs that may have expired by `until` (their
        expiry comes after their invocation, so those are nearly always invoked by
        then too; where the latest of them is not, a pass over them decides)."""
        latest = -math.inf
        if deletes := bisect.bisect_right(self._delete_invokes, invoked_by):
            latest = self._delete_settled[deletes - 1]
        if expiring := bisect.bisect_left(self._expiries, until + self._slack):
            candidate = self._latest_expiring[expiring - 1]
            if candidate.invoked <= invoked_by:
                return max(latest, candidate.settled_by)
            settled = (
                op.settled_by for op in self._expiring[:expiring] if op.invoked <= invoked_by
            )
            latest = max(latest, *settled, -math.inf)
        return latest

    def latest_acked_by(self, moment: float) -> Op | None:
        """Among acknowledged writes completed by `moment`, the one invoked last."""
        return self._acked.latest_by(moment)

    def latest_seen_by(self, read: Op, moment: float, overlaps: Overlaps | None) -> Op | None:
        """`latest_acked_by`, among the writes `read` must see (`overlaps`; None: all)."""
        if overlaps is None:
            return self._acked.latest_by(moment)
        if read.replicas not in self._acked_for:
            self._acked_for[read.replicas] = AckedWrites(
                op for op in self.acked if overlaps(read.replicas, op.replicas)
            )
        return self._acked_for[read.replicas].latest_by(moment)

    def expired_source(self, value: bytes, seen: Window) -> Op | None:
        """If every PUT that sent `value` had certainly expired when an observation in
        `seen` began, the one that expired last: the value came back from the dead."""
        puts = self._puts.get(value, [])
        if not puts or self.producers(value, seen):
            return None
        return max(puts, key=lambda op: op.expired_by)


def check(
    history: Sequence[Op],
    final: Mapping[str, bytes | None],
    clock_slack: float = CLOCK_SLACK,
    final_at: Window | Mapping[str, Window] = AFTER_EVERYTHING,
    overlaps: Overlaps | None = None,
) -> Report:
    """Checks `history` against `final` (key -> value, None when the key was absent).

    `clock_slack`: how far apart two writes must be to be ordered, and how far from the
    write's own window an expiry may be seen: CLOCK_SLACK where the nodes' clocks agree;
    where one is off by a skew, the skew plus CLOCK_SLACK, never the skew alone (a node
    ahead sees an expiry the skew and up to a millisecond early, SPEC.md rule 8.6).

    `final_at`: when the final state was observed, as (from, to) on the history's clock,
    for every key or per key (expiring writes are judged against it); by default after
    every write expired.

    `overlaps`: which acknowledged writes a GET must see, by the `replicas` of each
    (None: every one; the final state must hold every one, whatever its `replicas`).

    Raises ValueError if a key the history wrote has no final state: a missing read must
    not pass for a kept write."""
    writes_by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        if op.is_write:
            writes_by_key[op.key].append(op)
    missing = sorted(set(writes_by_key) - set(final))
    if missing:
        raise ValueError(f"no final state for written keys {missing[:10]}")
    keys = {
        key: KeyHistory(writes_by_key.get(key, ()), clock_slack) for key in {*writes_by_key, *final}
    }

    lost: list[LostWrite] = []
    resurrected: list[Resurrection] = []
    phantoms: list[Phantom] = []
    for key, state in final.items():
        index = keys[key]
        seen = final_at if isinstance(final_at, tuple) else final_at[key]
        phantom = state is not None and not index.sent(state)
        if phantom:
            phantoms.append(Phantom(key, state or b"", FINAL_READ))
        # A value seen must not be dead: expired itself, or older than an acknowledged
        # DELETE or expired PUT (the newest such write names the case).
        dead_since = None if state is None else index.expired_source(state, seen)
        produced = index.produced_by(state, seen)
        for op in index.acked:
            if produced + clock_slack > op.invoked:
                continue
            if state is None or not index.dead_at(op, seen):
                lost.append(LostWrite(op, state))
            elif not phantom and (dead_since is None or dead_since.invoked < op.invoked):
                dead_since = op
        if state is not None and dead_since is not None:
            resurrected.append(Resurrection(key, state, FINAL_READ, dead_since))

    stale_reads: list[StaleRead] = []
    for op in history:
        if op.kind is not Kind.GET or op.status not in (200, 404):
            continue
        index = keys.get(op.key) or KeyHistory((), clock_slack)
        source = read_source(op)
        if op.status == 200 and not index.sent(op.value or b""):
            phantoms.append(Phantom(op.key, op.value or b"", source))
        elif op.status == 200 and (expired := index.expired_source(op.value or b"", _window(op))):
            resurrected.append(Resurrection(op.key, op.value or b"", source, expired, op))
        elif (missed := _missed(op, index, clock_slack, overlaps)) is not None:
            if op.status == 200 and index.dead_at(missed, _window(op)):
                resurrected.append(Resurrection(op.key, op.value or b"", source, missed, op))
            else:
                stale_reads.append(StaleRead(op, missed))

    statuses = [op.status for op in history]
    writes = [op for op in history if op.is_write]
    return Report(
        ops=len(history),
        writes=len(writes),
        acked=sum(op.acknowledged for op in history),
        unavailable=statuses.count(503),
        not_enough_replicas=statuses.count(504),
        timeouts=statuses.count(None),
        other_failures=sum(
            op.status not in (None, 503, 504) and not op.acknowledged for op in writes
        ),
        lost=tuple(lost),
        resurrected=tuple(resurrected),
        phantoms=tuple(phantoms),
        stale_reads=tuple(stale_reads),
        expiring=sum(op.ttl is not None for op in writes),
        deletes=sum(op.kind is Kind.DELETE for op in writes),
    )


def _window(read: Op) -> Window:
    return (read.invoked, read.settled_by)


def _missed(
    read: Op, index: KeyHistory, clock_slack: float, overlaps: Overlaps | None
) -> Op | None:
    """The acknowledged write `read` (a GET answered 200 or 404) should have seen and
    did not, if any: one its quorum meets, completed before the read was invoked and
    invoked after every write that could have produced what the read returned had
    taken effect."""
    state = read.value if read.status == 200 else None
    missed = index.latest_seen_by(read, read.invoked - clock_slack, overlaps)
    produced = index.produced_by(state, _window(read), invoked_by=read.settled_by)
    if missed is not None and produced + clock_slack <= missed.invoked:
        return missed
    return None
