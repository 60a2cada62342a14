"""What the faults and convergence tiers (SPEC.md sections 14 and 15) share: the bound,
the length of a scenario (thorough, or `--quick`), and a recorder that keeps every
operation a scenario sends and every fault it applies on one clock, judges answers
against the bound, and leaves a run folder (history, fault timeline, summary, plot)
for the report.

Everything goes through the public API and through signals to the processes; nothing
here knows what implementation it talks to.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dht.conformance.launcher import Node
from dht.conformance.traffic import attempt, final_read
from dht.history.classification import Classification, classify
from dht.history.operation import Kind, Op
from dht.history.run import FaultWindow, Run, relative
from dht.history.run_folder import new_run_dir, write_run
from dht.testbed.toxiproxy import node_name

# SPEC.md section 14: every request under a fault is answered within this many seconds.
BOUND = 5.0
# A client waits a little longer than the bound, so an answer past it is seen as late
# rather than lost.
CLIENT_TIMEOUT = BOUND + 2.0
# "1": each scenario shorter, for CI; the rules are the same. The kit sets it from
# --quick ("0" without); pytest in a clone runs them short unless it is "0".
QUICK_ENV = "DHT_CONFORMANCE_QUICK"
SUCCESS = (200, 201, 202, 404)
REFUSED = (503, 504)
# SPEC.md sections 20 and 21: a node's volume when the kit fills it, room for a
# scenario's data many times over and small enough to fill at once; and how soon after
# its ballast goes a write through that node must be stored (a node that needs a restart
# for it gets one, and then the bound).
VOLUME_BYTES = 256 * 1024 * 1024
RESUME_SECONDS = 10.0


def quick() -> bool:
    return os.environ.get(QUICK_ENV, "1") == "1"


def seconds(thorough: float, short: float) -> float:
    """A scenario's length: `thorough` by default, `short` with --quick."""
    return short if quick() else thorough


@dataclass
class Recorder:
    """One scenario's operations and faults on the monotonic clock."""

    scenario: str
    nodes: Sequence[Node]
    history: list[Op] = field(default_factory=list)
    faults: list[FaultWindow] = field(default_factory=list)
    # Kept in the run folder's run.json with the bound (the nemesis's seed, ...).
    details: dict[str, object] = field(default_factory=dict)

    def name(self, node: Node) -> str:
        return node_name(list(self.nodes).index(node))

    @contextmanager
    def fault(self, label: str) -> Iterator[None]:
        """Marks the block as one fault on the timeline, from its start to its heal."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.faults.append(FaultWindow(label, started, time.monotonic()))

    def send(
        self,
        node: Node,
        kind: Kind,
        key: str,
        value: bytes | None = None,
        replicas: str | None = None,
    ) -> Op:
        """One request, recorded in the history."""
        op = attempt(node, kind, key, value, CLIENT_TIMEOUT, None, self.name(node), replicas)
        self.history.append(op)
        return op

    def add(self, ops: Iterable[Op]) -> None:
        """Operations the client threads recorded."""
        self.history.extend(ops)

    def finish(self, readers: Sequence[Node]) -> tuple[Classification, Path]:
        """Reads every key the history wrote at the default `replicas` through `readers`
        (in turn), judges the history against what it read (what became of each write,
        times from the run's first event), and writes the run folder."""
        final: dict[str, bytes | None] = {}
        final_at = {}
        written = sorted({op.key for op in self.history if op.is_write})
        for index, key in enumerate(written):
            final[key], final_at[key] = final_read(readers[index % len(readers)], key)
        return self.write(final, final_at)

    def write(
        self, final: dict[str, bytes | None], final_at: dict[str, tuple[float, float]]
    ) -> tuple[Classification, Path]:
        run = Run(
            self.scenario,
            sorted(self.history, key=lambda op: op.invoked),
            self.faults,
            final,
            final_at,
            {"bound_seconds": BOUND, "quick": quick(), "client_timeout": CLIENT_TIMEOUT}
            | self.details,
        )
        run_dir = new_run_dir(self.scenario)
        write_run(run_dir, run)
        shifted = relative(run)
        return classify(shifted.history, shifted.final, final_at=shifted.final_at), run_dir


def during(ops: Iterable[Op], window: FaultWindow) -> list[Op]:
    """The operations that began inside a fault's window."""
    return [op for op in ops if window.start <= op.invoked <= window.end]


def took(op: Op) -> float | None:
    return None if op.completed is None else op.completed - op.invoked


def answered_ok(op: Op) -> bool:
    """A success (2xx, or 404 for an absent key) within the bound."""
    return op.status in SUCCESS and (took(op) or 0.0) <= BOUND


def answered_refused(op: Op) -> bool:
    """504 (or 503) within the bound: the request could not reach enough replicas."""
    return op.status in REFUSED and (took(op) or 0.0) <= BOUND


def describe(op: Op) -> str:
    at = "the default replicas" if op.replicas is None else f"replicas={op.replicas}"
    seconds_taken = took(op)
    answer = "no answer" if seconds_taken is None else f"{op.status} after {seconds_taken:.2f} s"
    return f"{op.kind.value} {op.key} through {op.node} at {at}: {answer}"


def stored(op: Op) -> bool:
    return op.status == 201


def write_until_stored(recorder: Recorder, node: Node, keys: Sequence[str], deadline: float) -> Op:
    """PUTs through `node`, recorded, until one is stored or `deadline` seconds pass;
    the last. Each to the next of `keys`, with a value no client writes."""
    started = time.monotonic()
    number = 0
    while True:
        number += 1
        key = keys[number % len(keys)]
        op = recorder.send(node, Kind.PUT, key, f"resumed-{number}".encode())
        if stored(op) or time.monotonic() - started > deadline:
            return op
        time.sleep(0.1)


def first_failure(ops: Sequence[Op], judge: Callable[[Op], bool], wanted: str) -> str:
    """'' when every operation meets `judge`, else one line for the report: the first
    that did not, what was wanted, and how many more did not."""
    bad = [op for op in ops if not judge(op)]
    if not bad:
        return ""
    more = f" (and {len(bad) - 1} more of {len(ops)})" if len(bad) > 1 else ""
    return f"{describe(bad[0])}; expected {wanted} within {BOUND:.0f} s{more}"
