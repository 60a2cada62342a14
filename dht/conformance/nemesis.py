"""The nemesis's run (SPEC.md section 21): the schedule's faults applied in turn from
this thread to a cluster with every fault hook (`nemesis_cluster.py`), clients through
every node at the default `replicas`, everything healed, each key read, and the history
judged; and a failing run shrunk to the smallest schedule that still fails.

The schedule and each client's operations come from the seed; the clients run in real
time, so a run with the same seed replays the faults and the order of each client's
operations, not their interleaving with the faults or with each other.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from dht.conformance.faults import (
    BOUND,
    CLIENT_TIMEOUT,
    REFUSED,
    SUCCESS,
    Recorder,
    first_failure,
    quick,
    took,
)
from dht.conformance.nemesis_cluster import NemesisCluster, NotHealed
from dht.conformance.nemesis_schedule import TAIL_SECONDS, Fault, Schedule, new_seed
from dht.conformance.shrink import ddmin
from dht.conformance.traffic import Clients, Mix, key_space
from dht.history.classification import Classification
from dht.history.operation import Op
from dht.testbed.toxiproxy import node_name

log = logging.getLogger(__name__)

KEYS = key_space(16)
# Two clients a node: every node is sent reads, writes and deletes throughout.
CLIENTS = 6
MIX = Mix(put=0.5, delete=0.1, expiring=0.0)
SCHEDULE_FILE = "schedule.json"
SHRINK_FILE = "shrink.json"
# The kit's --seed, --nemesis-seconds and --shrink-minutes, as it passes them to the suite.
SEED_ENV = "DHT_NEMESIS_SEED"
SECONDS_ENV = "DHT_NEMESIS_SECONDS"
SHRINK_ENV = "DHT_NEMESIS_SHRINK_MINUTES"
# The kit's --nemesis-schedule: a run folder's schedule.json, run as it is (a shrunk one).
SCHEDULE_ENV = "DHT_NEMESIS_SCHEDULE"
# Unset, as in the repository's own `make test`: a short schedule in quick mode, and no
# shrink there (the kit sets all three).
QUICK_SECONDS = 20.0
# Its 20 s: two nodes' power cut in turn, links cut into one, then a node's disk full.
REPOSITORY_SEED = 14
THOROUGH_SECONDS = 300.0
THOROUGH_SHRINK_MINUTES = 10.0
# The faults a shrink's summary names; the run folder's schedule.json has them all.
SHOWN_FAULTS = 6
# What one run takes beyond its schedule: the cluster's start, the final reads, the stop.
RUN_OVERHEAD_SECONDS = 60.0


def nemesis_seed() -> int:
    """--seed; unset, REPOSITORY_SEED in quick mode (the repository's `make test`, whose
    runs should differ only by timing), else a new one (the report prints it)."""
    given = os.environ.get(SEED_ENV)
    if given:
        return int(given)
    return REPOSITORY_SEED if quick() else new_seed()


def given_schedule() -> Schedule | None:
    """--nemesis-schedule's schedule, or None: the run draws one from its seed."""
    given = os.environ.get(SCHEDULE_ENV)
    return Schedule.from_json(Path(given).read_text()) if given else None


def nemesis_seconds() -> float:
    given = os.environ.get(SECONDS_ENV)
    return float(given) if given else (QUICK_SECONDS if quick() else THOROUGH_SECONDS)


def shrink_minutes() -> float:
    given = os.environ.get(SHRINK_ENV)
    return float(given) if given else (0.0 if quick() else THOROUGH_SHRINK_MINUTES)


@dataclass(frozen=True)
class Applied:
    """A fault as it ran: on which node, from when to its heal (monotonic), of what kind."""

    node: int
    start: float
    end: float
    kind: str = ""

    def during(self, op: Op) -> bool:
        """Whether `op` ran while this fault was on (from its sending until its answer,
        or the client's timeout)."""
        end = op.completed if op.completed is not None else op.invoked + CLIENT_TIMEOUT
        return self.start <= end and op.invoked <= self.end


@dataclass
class NemesisRun:
    """What one run found: `problems` ('' each when none) and where its folder is."""

    schedule: Schedule
    judged: Classification
    run_dir: Path
    problems: list[str] = field(default_factory=list)

    @property
    def failure(self) -> str:
        return "; ".join(problem for problem in self.problems if problem)


def answered_in_time(op: Op) -> bool:
    """Any answer the contract allows (a 2xx, 404, or 503/504 where a quorum is out of
    reach) within the bound."""
    return op.status in (*SUCCESS, *REFUSED) and (took(op) or 0.0) <= BOUND


def answered_at_all(op: Op) -> bool:
    """An answer within the bound, whatever its status: a write while a disk is full
    may be refused with any (SPEC.md rule 20.1), but not left hanging."""
    return op.status is not None and (took(op) or 0.0) <= BOUND


def unfaulted(ops: list[Op], applied: list[Applied]) -> list[Op]:
    """The requests through a node no fault was on while they ran (from their sending
    until their answer, or the client's timeout): the ones judged by their answers."""
    return [
        op
        for op in ops
        if not any(op.node == node_name(fault.node) and fault.during(op) for fault in applied)
    ]


def judge_answers(ops: list[Op], applied: list[Applied]) -> list[str]:
    """The answers of the requests through nodes no fault was on (`unfaulted`): writes
    while a disk was full are allowed any status, as section 20 allows them; the rest,
    a 2xx, 404, 503 or 504. Within the bound, all of them."""
    full = [fault for fault in applied if fault.kind == "disk"]
    while_full: list[Op] = []
    others: list[Op] = []
    for op in unfaulted(ops, applied):
        full_then = op.is_write and any(fault.during(op) for fault in full)
        (while_full if full_then else others).append(op)
    allowed = "a 2xx, 404, 503 or 504 through a node not faulted"
    return [
        first_failure(others, answered_in_time, allowed),
        first_failure(while_full, answered_at_all, "an answer, any status, while a disk was full"),
    ]


def run_schedule(schedule: Schedule, root: Path, scenario: str) -> NemesisRun:
    """One run of `schedule` on a fresh cluster in `root`; its run folder holds the
    schedule as `schedule.json`, besides the history, timeline and plot."""
    with NemesisCluster(root, dict(schedule.left_out)) as nemesis:
        return drive(nemesis, schedule, scenario)


def drive(nemesis: NemesisCluster, schedule: Schedule, scenario: str) -> NemesisRun:
    """Clients from the seed; each fault at its time (late when the one before took
    longer to heal, never skipped); the tail; the final reads; the judgement. A node
    the kit cannot make whole again (NotHealed) ends the schedule there, as a next fault
    would leave no quorum: the run fails saying so, and the tail, the final reads
    through the other nodes and the judgement follow."""
    recorder = Recorder(
        scenario,
        nemesis.nodes,
        details={"seed": schedule.seed, "schedule_seconds": schedule.seconds},
    )
    clients = Clients(nemesis.nodes, KEYS, CLIENTS, schedule.seed, timeout=CLIENT_TIMEOUT, mix=MIX)
    applied: list[Applied] = []
    healing: list[str] = []
    broken: int | None = None
    began = time.monotonic()
    clients.start()
    try:
        for fault in schedule.faults:
            time.sleep(max(0.0, began + fault.start - time.monotonic()))
            started = time.monotonic()
            try:
                with recorder.fault(fault.label()):
                    healing.append(nemesis.apply(fault, recorder, KEYS))
            except NotHealed as exc:
                healing.append(f"{exc}; the schedule stopped there")
                broken = fault.node
                applied.append(Applied(fault.node, started, math.inf, fault.kind))  # not healed
                break
            applied.append(Applied(fault.node, started, time.monotonic(), fault.kind))
        if broken is None:
            time.sleep(max(0.0, began + schedule.seconds - time.monotonic()))
        else:
            time.sleep(TAIL_SECONDS)
    finally:
        ops = clients.stop()
    recorder.add(ops)
    readers = [node for index, node in enumerate(nemesis.nodes) if index != broken]
    judged, run_dir = recorder.finish(readers)
    (run_dir / SCHEDULE_FILE).write_text(schedule.to_json() + "\n")
    problems = [
        *healing,
        judged.failure(),
        *judge_answers(ops, applied),
        "" if judged.fates else "no write was acknowledged: nothing to check",
    ]
    return NemesisRun(schedule, judged, run_dir, problems)


@dataclass(frozen=True)
class ShrinkResult:
    """The smallest failing run a shrink found, and what the search cost."""

    smallest: NemesisRun
    original: int  # faults in the failing run
    tries: int  # the runs it made, a try made again included
    seconds: float
    minimal: bool  # 1-minimal; False when the budget ended the search first
    unresolved: int = 0  # tries that could not run
    finished: bool = True  # False when the budget ended the search

    def summary(self) -> str:
        shrunk = self.smallest.schedule
        ending = shrink_ending(self.minimal, self.finished)
        labels = "; ".join(
            f"{fault.start:.1f} s {fault.label()} for {fault.duration:.1f} s"
            for fault in shrunk.faults[:SHOWN_FAULTS]
        )
        if len(shrunk.faults) > SHOWN_FAULTS:
            labels += f"; and {len(shrunk.faults) - SHOWN_FAULTS} more (its schedule.json)"
        return (
            f"shrunk from {self.original} faults to {len(shrunk.faults)} in {self.seconds:.0f} s "
            f"({self.tries} runs{could_not_run(self.unresolved)}, {ending}): "
            f"{labels or 'no fault at all'}; "
            f"its run {self.smallest.run_dir.name}"
        )


def shrink_run(failed: NemesisRun, root: Path, minutes: float) -> ShrinkResult:
    """Delta debugging over the faults of `failed`: each subset run on a fresh cluster in
    `root`, until a 1-minimal failing schedule is found or no run fits in the `minutes`
    left. Keeps the run folder of the smallest failing run (scenario `nemesis-shrunk`,
    with `shrink.json`) and removes the others."""
    started = time.monotonic()
    deadline = started + minutes * 60.0
    # The failing runs by their faults' starts (one fault at a time: each start is its own).
    failing: dict[tuple[float, ...], NemesisRun] = {}

    runs = 0

    def fails(subset: tuple[Fault, ...]) -> bool | None:
        # A node that does not come back from a fault fails its run (NotHealed, in
        # `drive`); a try that could not run at all (the kit's own trouble: a port taken,
        # a mount refused) is tried once more if the budget allows, then left unresolved:
        # it says nothing of the failure being shrunk, and is never taken for a pass.
        nonlocal runs
        for again in (False, True):
            if again and out_of_time(subset):
                return None
            runs += 1
            try:
                # A short folder: the power-loss filesystem's control socket lives in it.
                attempt = run_schedule(
                    failed.schedule.keeping(subset), root / f"t{runs}", "nemesis-shrunk"
                )
                break
            except Exception:
                log.exception("a shrink's try of %d faults could not run", len(subset))
        else:
            return None
        if attempt.failure:
            failing[starts(subset)] = attempt
        else:
            shutil.rmtree(attempt.run_dir, ignore_errors=True)
        return bool(attempt.failure)

    def out_of_time(subset: tuple[Fault, ...]) -> bool:
        one_run = failed.schedule.keeping(subset).seconds + RUN_OVERHEAD_SECONDS
        return time.monotonic() + one_run > deadline

    shrunk = ddmin(failed.schedule.faults, fails, out_of_time)
    smallest = failing.get(starts(shrunk.smallest), failed)
    for run in failing.values():
        if run is not smallest:
            shutil.rmtree(run.run_dir, ignore_errors=True)
    result = ShrinkResult(
        smallest,
        len(failed.schedule.faults),
        runs,  # the tries, and a try made again
        time.monotonic() - started,
        shrunk.minimal,
        shrunk.unresolved,
        shrunk.finished,
    )
    if smallest is not failed:
        facts = {
            "seed": failed.schedule.seed,
            "original_faults": result.original,
            "shrunk_faults": len(smallest.schedule.faults),
            "tries": result.tries,
            "seconds": round(result.seconds, 1),
            "minimal": result.minimal,
            "unresolved": result.unresolved,
            "finished": result.finished,
            "failing_run": failed.run_dir.name,
        }
        (smallest.run_dir / SHRINK_FILE).write_text(json.dumps(facts, indent=2) + "\n")
    return result


def shrink_ending(minimal: bool, finished: bool) -> str:
    """How a shrink's search ended, as the summary and the report say it."""
    if minimal:
        return "1-minimal"
    if not finished:
        return "the budget ended the search"
    return "not shown 1-minimal: a try it needed could not run"


def could_not_run(unresolved: int) -> str:
    """A shrink's unresolved tries, as the summary and the report count them."""
    if not unresolved:
        return ""
    return f"; {unresolved} {'try' if unresolved == 1 else 'tries'} could not be run"


def starts(faults: tuple[Fault, ...]) -> tuple[float, ...]:
    return tuple(sorted(fault.start for fault in faults))
