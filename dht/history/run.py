"""What one chaos run is, in memory: the operations the clients recorded, the faults
applied meanwhile and the final state observed, all on one clock. `dht.history.run_folder`
writes and reads it, `dht.history.plot` draws it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dht.history.operation import AFTER_EVERYTHING, Op, Window


@dataclass(frozen=True)
class FaultWindow:
    """One fault as it was applied, from injection to the end of its heal, on the
    history's clock. `label` says what and where, e.g. "cut links into node2"."""

    label: str
    start: float
    end: float


@dataclass(frozen=True)
class Run:
    """Everything a chaos run leaves to judge it by: the `history` the clients recorded,
    the `faults` applied meanwhile, the `final` state (key -> value, None when absent)
    observed within `final_at` (one window for every key, or one per key), all on one
    clock, and free-form `details` (seed, seconds, client_timeout, ...) to keep with it.
    """

    scenario: str
    history: list[Op]
    faults: list[FaultWindow]
    final: dict[str, bytes | None]
    final_at: Window | dict[str, Window] = AFTER_EVERYTHING
    details: dict[str, Any] = field(default_factory=dict)


def run_origin(run: Run) -> float:
    """The run's first event on its clock (earliest invocation or fault start), which
    the files and the plot count time from; 0.0 for a run with neither."""
    starts = [op.invoked for op in run.history] + [fault.start for fault in run.faults]
    return min(starts, default=0.0)


def relative(run: Run) -> Run:
    """`run` with every time counted from its first event (`run_origin`), as its run
    folder keeps it and a report names it; an infinite time stays infinite."""
    origin = run_origin(run)

    def window(seen: Window) -> Window:
        return (seen[0] - origin, seen[1] - origin)

    history = [
        dataclasses.replace(
            op,
            invoked=op.invoked - origin,
            completed=None if op.completed is None else op.completed - origin,
        )
        for op in run.history
    ]
    faults = [FaultWindow(f.label, f.start - origin, f.end - origin) for f in run.faults]
    final_at = (
        window(run.final_at)
        if isinstance(run.final_at, tuple)
        else {key: window(seen) for key, seen in run.final_at.items()}
    )
    return Run(run.scenario, history, faults, run.final, final_at, run.details)


def outcome(status: int | None) -> str:
    """How a plot and a reader group an answer: "ok" for a 2xx or a 404 (the key is
    absent: a read that worked), "timeout" when none came, else the status."""
    if status is None:
        return "timeout"
    if 200 <= status < 300 or status == 404:
        return "ok"
    return str(status)
