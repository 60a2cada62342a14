"""What became of each write, as Jepsen's set checker says it: every acknowledged write
(PUT 201, DELETE 202) is stable, lost, stale, undone or never read, and every write that
got no answer or a 5xx is indeterminate (it may or may not have taken effect; it is
never counted as acknowledged). Built on the checker's findings (`dht.history.checker`),
which already decide what a read or the final state may legitimately miss; this module
only sorts them by write, and adds what a read saw.

One class per acknowledged write, the first that applies:
- lost: the final state misses it (`LostWrite`);
- undone: a value it made dead (a DELETE, or a PUT's expiry) was seen again, in the
  final state or by a GET (`Resurrection.dead_by`);
- stale: a quorum GET invoked after it completed returned an older state (`StaleRead`);
- stable: some read saw it (a GET or the final read): a PUT's value, or, for a DELETE,
  the key absent when no acknowledged write invoked after the DELETE had completed yet;
- never read: nothing says either way (overwritten before any read came).

Invented values (`Phantom`) and undone deletes are counted as the checker finds them.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dht.history.checker import CLOCK_SLACK, KeyHistory, check
from dht.history.operation import AFTER_EVERYTHING, Kind, Op, Window
from dht.history.verdict import Report

# How many examples of each kind a message or a report shows.
EXAMPLES = 3


class Fate(enum.Enum):
    """What became of one acknowledged write."""

    STABLE = "stable"
    LOST = "lost"
    STALE = "stale"
    UNDONE = "undone"
    NEVER_READ = "never read"


# The order counts are shown in, Fate's and then the checker's own.
COUNTED = ("stable", "lost", "stale", "never read", "undone", "invented", "indeterminate")
# The kinds that fail a run.
FAILING = ("lost", "stale", "undone", "invented")


def indeterminate(op: Op) -> bool:
    """A write that got no answer, or a 5xx: it may or may not have taken effect."""
    return op.is_write and (op.status is None or op.status >= 500)


@dataclass(frozen=True)
class Classification:
    """Every acknowledged write with its fate, the indeterminate writes, and the
    checker's report the fates were read from."""

    report: Report
    fates: tuple[tuple[Op, Fate], ...]
    indeterminate: tuple[Op, ...]

    @property
    def ok(self) -> bool:
        return self.report.ok

    def of(self, fate: Fate) -> list[Op]:
        return [op for op, its in self.fates if its is fate]

    def counts(self) -> dict[str, int]:
        """Writes by fate, resurrections (undone), phantoms (invented) and indeterminate
        writes, in `COUNTED` order. `undone` counts the resurrections seen, so one
        DELETE undone twice counts twice, as the checker reports it."""
        by_fate = {fate.value: len(self.of(fate)) for fate in Fate}
        by_fate["undone"] = len(self.report.resurrected)
        by_fate["invented"] = len(self.report.phantoms)
        by_fate["indeterminate"] = len(self.indeterminate)
        return {kind: by_fate[kind] for kind in COUNTED}

    def line(self) -> str:
        """`stable=12 lost=0 stale=1 never read=30 undone=0 invented=0 indeterminate=4`"""
        return " ".join(f"{kind}={count}" for kind, count in self.counts().items())

    def examples(self, limit: int = EXAMPLES) -> dict[str, list[str]]:
        """The first `limit` of each kind, as lines naming key, value, when and the node
        (kinds with none are left out)."""
        shown: dict[str, list[str]] = {
            "lost": [str(item) for item in self.report.lost],
            "stale": [str(item) for item in self.report.stale_reads],
            "undone": [str(item) for item in self.report.resurrected],
            "invented": [str(item) for item in self.report.phantoms],
            "indeterminate": [_written(op) for op in self.indeterminate],
            "never read": [_written(op) for op in self.of(Fate.NEVER_READ)],
            "stable": [_written(op) for op in self.of(Fate.STABLE)],
        }
        return {kind: shown[kind][:limit] for kind in COUNTED if shown[kind]}

    def failure(self, limit: int = EXAMPLES) -> str:
        """'' when nothing was lost, read stale, undone or invented; else one line for a
        report: the counts and the first few examples of each failing kind."""
        if self.ok:
            return ""
        examples = self.examples(limit)
        found = [f"{kind}: {'; '.join(examples[kind])}" for kind in FAILING if kind in examples]
        return f"history judged: {self.line()}; " + " | ".join(found)


def _written(op: Op) -> str:
    answer = "no answer" if op.status is None else f"answered {op.status}"
    return f"{op.key!r}: {op.describe()}, {answer}"


def classify(
    history: Sequence[Op],
    final: Mapping[str, bytes | None],
    clock_slack: float = CLOCK_SLACK,
    final_at: Window | Mapping[str, Window] = AFTER_EVERYTHING,
    report: Report | None = None,
) -> Classification:
    """Classifies the writes of `history` against `final`, as `check` judges them (its
    `report`, if already made for these arguments, is reused)."""
    if report is None:
        report = check(history, final, clock_slack, final_at)
    lost = {id(item.write) for item in report.lost}
    undone = {id(item.dead_by) for item in report.resurrected}
    stale = {id(item.missed) for item in report.stale_reads}

    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history:
        if op.is_write:
            by_key[op.key].append(op)
    indexes = {key: KeyHistory(writes, clock_slack) for key, writes in by_key.items()}
    seen_values: set[tuple[str, bytes]] = set()
    absent_seen: dict[str, list[Window]] = defaultdict(list)
    for op in history:
        if op.kind is Kind.GET and op.status == 200 and op.value is not None:
            seen_values.add((op.key, op.value))
        elif op.kind is Kind.GET and op.status == 404:
            absent_seen[op.key].append((op.invoked, op.settled_by))
    for key, state in final.items():
        if state is None:
            window = final_at if isinstance(final_at, tuple) else final_at[key]
            absent_seen[key].append(window)
        else:
            seen_values.add((key, state))

    fates: list[tuple[Op, Fate]] = []
    for op in history:
        if not op.acknowledged:
            continue
        if id(op) in lost:
            fate = Fate.LOST
        elif id(op) in undone:
            fate = Fate.UNDONE
        elif id(op) in stale:
            fate = Fate.STALE
        elif op.kind is Kind.PUT and (op.key, op.value) in seen_values:
            fate = Fate.STABLE
        elif op.kind is Kind.DELETE and any(
            _may_have_seen(op, window, indexes[op.key], clock_slack)
            for window in absent_seen[op.key]
        ):
            fate = Fate.STABLE
        else:
            fate = Fate.NEVER_READ
        fates.append((op, fate))
    return Classification(report, tuple(fates), tuple(filter(indeterminate, history)))


def _may_have_seen(delete: Op, seen: Window, index: KeyHistory, clock_slack: float) -> bool:
    """Whether an observation of the key absent in `seen` may have been produced by
    `delete`: it ended after the DELETE was invoked, and began before any acknowledged
    write invoked after the DELETE completed had completed (which would have replaced
    it, by rule 8.3)."""
    since, until = seen
    if until + clock_slack < delete.invoked:
        return False
    later = index.latest_acked_by(since - clock_slack)
    return later is None or later.invoked <= delete.settled_by + clock_slack
