"""The nemesis's run (SPEC.md section 21): one 3-node cluster whose nodes carry every
fault hook this machine has at once, clients through every node at the default
`replicas`, the schedule's faults applied in turn from this thread, everything healed,
each key read, and the history judged.

The hooks: each node in a network namespace of its own with its links through
Toxiproxy (`slow`, `cut`), its wall clock under libfaketime (`clock`), and its data
folder on the power-loss filesystem (`power`); `kill` and `pause` need only signals.
A full disk is not in the nemesis: a node's folder cannot be on the power-loss
filesystem and on a small volume of its own at once, and the power cut was chosen.

The schedule and each client's operations come from the seed; the clients run in real
time, so a run with the same seed replays the faults and the order of each client's
operations, not their interleaving with the faults or with each other.
"""

from __future__ import annotations

import json
import logging
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
from dht.conformance.launcher import Cluster, Node
from dht.conformance.nemesis_schedule import Fault, Schedule, new_seed
from dht.conformance.shrink import ddmin
from dht.conformance.traffic import Clients, Mix, key_space
from dht.history.classification import Classification
from dht.history.operation import Op
from dht.testbed import fake_clock
from dht.testbed.fake_clock import FakeClock
from dht.testbed.netns import NetnsTestbed, netns_unavailable
from dht.testbed.power_loss import PowerLossMount, mount, power_loss_unavailable
from dht.testbed.toxiproxy import Link, free_ports, node_name

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
# Its 20 s: a power cut, links cut into a node, links slowed, then a clock 10 s behind.
REPOSITORY_SEED = 18
THOROUGH_SECONDS = 300.0
THOROUGH_SHRINK_MINUTES = 10.0
# The faults a shrink's summary names; the run folder's schedule.json has them all.
SHOWN_FAULTS = 6
# What one run takes beyond its schedule: the cluster's start, the final reads, the stop.
RUN_OVERHEAD_SECONDS = 60.0
# Why a full disk never is in the schedule (the module's docstring says more).
DISK_LEFT_OUT = (
    "a node's folder is on the power-loss filesystem, and cannot be on a small volume too"
)


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


def unavailable_kinds() -> dict[str, str]:
    """The kinds of fault this machine cannot apply, each with the reason."""
    reasons: dict[str, str] = {}
    if (why := netns_unavailable()) is not None:
        reasons["slow"] = reasons["cut"] = f"link faults need network namespaces: {why}"
    if (why := fake_clock.unavailable()) is not None:
        reasons["clock"] = f"clock faults need a fake clock: {why}"
    if (why := power_loss_unavailable()) is not None:
        reasons["power"] = f"a power cut needs the lazy filesystem: {why}"
    return reasons


class NemesisCluster:
    """3 nodes with the hooks of every kind not in `left_out`; a context manager that
    stops the nodes, then the mounts and namespaces. After the start, `left_out` also
    holds `clock` when the fake clock did not reach a node's process (a Go or static
    binary)."""

    def __init__(self, root: Path, left_out: dict[str, str]) -> None:
        self.root = root
        self.left_out = dict(left_out)
        ports = free_ports(3)
        self.testbed = None if "cut" in left_out else NetnsTestbed(ports, log_dir=root)
        self.clock = None if "clock" in left_out else FakeClock(root / "clocks", 3)
        self.cluster = Cluster(root, 3, ports=ports)
        self.mounts: list[PowerLossMount] = []

    @property
    def nodes(self) -> list[Node]:
        return self.cluster.nodes

    def __enter__(self) -> NemesisCluster:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _start(self) -> None:
        if self.testbed is not None:
            self.testbed.start()
        for index, node in enumerate(self.nodes):
            if self.testbed is not None:
                node.prefix = self.testbed.command_prefix(index)
            if self.clock is not None:
                node.env = self.clock.environment(index)
                self.clock.set_offset(index, 0.0)
            if "power" not in self.left_out:
                log = self.root / f"filesystem-{index}.log"
                self.mounts.append(mount(self.root / f"backing-{index}", node.data_dir, log))
        self.cluster.start()
        if self.clock is not None:
            for index, node in enumerate(self.nodes):
                assert node.process is not None
                if (why := fake_clock.reach(node.process.pid)) is not None:
                    self.left_out["clock"] = f"the fake clock does not reach node{index + 1}: {why}"

    def close(self) -> None:
        self.cluster.stop()
        for node in self.nodes:
            if node.process is not None:
                fake_clock.release(node.process.pid)
        for mounted in self.mounts:
            mounted.unmount()
        if self.testbed is not None:
            self.testbed.stop()

    # -- the faults ----------------------------------------------------------------------

    def links(self, fault: Fault) -> list[Link]:
        assert self.testbed is not None
        into, out_of = self.testbed.links_into(fault.node), self.testbed.links_out_of(fault.node)
        direction = fault.parameters.get("direction", "both")
        return {"into": into, "out of": out_of}.get(direction, [*into, *out_of])

    def apply(self, fault: Fault) -> None:
        """Applies `fault`, lets it last its duration, and heals it: a killed node is
        back once it answers /v0/status again."""
        node = self.nodes[fault.node]
        if fault.kind in ("kill", "power"):
            node.kill()
            if fault.kind == "power":
                self.mounts[fault.node].power_cut()
            time.sleep(fault.duration)
            node.start(wait=False)
            node.wait_ready()
        elif fault.kind == "pause":
            node.pause()
            time.sleep(fault.duration)
            node.resume()
        elif fault.kind in ("slow", "cut"):
            assert self.testbed is not None
            if fault.kind == "slow":
                latency = fault.parameters["latency_ms"]
                self.testbed.add_toxic(self.links(fault), "latency", latency=latency)
            else:
                self.testbed.cut(self.links(fault))
            time.sleep(fault.duration)
            self.testbed.heal()
        elif fault.kind == "clock":
            assert self.clock is not None
            self.clock.set_offset(fault.node, fault.parameters["offset_seconds"])
            time.sleep(fault.duration)
            self.clock.set_offset(fault.node, 0.0)
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")


@dataclass(frozen=True)
class Applied:
    """A fault as it ran: on which node, from when to its heal (monotonic)."""

    node: int
    start: float
    end: float


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


def unfaulted(ops: list[Op], applied: list[Applied]) -> list[Op]:
    """The requests through a node no fault was on while they ran (from their sending
    until their answer, or the client's timeout): the ones judged by their answers."""
    judged = []
    for op in ops:
        end = op.completed if op.completed is not None else op.invoked + CLIENT_TIMEOUT
        if not any(
            op.node == node_name(fault.node) and fault.start <= end and op.invoked <= fault.end
            for fault in applied
        ):
            judged.append(op)
    return judged


def run_schedule(schedule: Schedule, root: Path, scenario: str) -> NemesisRun:
    """One run of `schedule` on a fresh cluster in `root`; its run folder holds the
    schedule as `schedule.json`, besides the history, timeline and plot."""
    with NemesisCluster(root, dict(schedule.left_out)) as nemesis:
        return drive(nemesis, schedule, scenario)


def drive(nemesis: NemesisCluster, schedule: Schedule, scenario: str) -> NemesisRun:
    """Clients from the seed; each fault at its time (late when the one before took
    longer to heal, never skipped); the tail; the final reads; the judgement."""
    recorder = Recorder(
        scenario,
        nemesis.nodes,
        details={"seed": schedule.seed, "schedule_seconds": schedule.seconds},
    )
    clients = Clients(nemesis.nodes, KEYS, CLIENTS, schedule.seed, timeout=CLIENT_TIMEOUT, mix=MIX)
    applied: list[Applied] = []
    began = time.monotonic()
    clients.start()
    try:
        for fault in schedule.faults:
            time.sleep(max(0.0, began + fault.start - time.monotonic()))
            with recorder.fault(fault.label()):
                started = time.monotonic()
                nemesis.apply(fault)
            applied.append(Applied(fault.node, started, time.monotonic()))
        time.sleep(max(0.0, began + schedule.seconds - time.monotonic()))
    finally:
        ops = clients.stop()
    recorder.add(ops)
    judged, run_dir = recorder.finish(nemesis.nodes)
    (run_dir / SCHEDULE_FILE).write_text(schedule.to_json() + "\n")
    under = unfaulted(ops, applied)
    problems = [
        judged.failure(),
        first_failure(under, answered_in_time, "a 2xx, 404, 503 or 504 through a node not faulted"),
        "" if judged.fates else "no write was acknowledged: nothing to check",
    ]
    return NemesisRun(schedule, judged, run_dir, problems)


@dataclass(frozen=True)
class ShrinkResult:
    """The smallest failing run a shrink found, and what the search cost."""

    smallest: NemesisRun
    original: int  # faults in the failing run
    tries: int
    seconds: float
    minimal: bool  # 1-minimal; False when the budget ended the search first

    def summary(self) -> str:
        shrunk = self.smallest.schedule
        ending = "1-minimal" if self.minimal else "the budget ended the search"
        labels = "; ".join(
            f"{fault.start:.1f} s {fault.label()} for {fault.duration:.1f} s"
            for fault in shrunk.faults[:SHOWN_FAULTS]
        )
        if len(shrunk.faults) > SHOWN_FAULTS:
            labels += f"; and {len(shrunk.faults) - SHOWN_FAULTS} more (its schedule.json)"
        return (
            f"shrunk from {self.original} faults to {len(shrunk.faults)} in {self.seconds:.0f} s "
            f"({self.tries} runs, {ending}): {labels or 'no fault at all'}; "
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

    tries = iter(range(1, 1_000_000))

    def fails(subset: tuple[Fault, ...]) -> bool:
        # A short folder: the power-loss filesystem's control socket lives in it.
        try:
            attempt = run_schedule(
                failed.schedule.keeping(subset), root / f"t{next(tries)}", "nemesis-shrunk"
            )
        except Exception:
            # A try that could not run (a node that never started) says nothing of the
            # failure being shrunk: counted as passing, so the search keeps what it has.
            log.exception("a shrink's try of %d faults could not run", len(subset))
            return False
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
        shrunk.tries,
        time.monotonic() - started,
        shrunk.minimal,
    )
    if smallest is not failed:
        facts = {
            "seed": failed.schedule.seed,
            "original_faults": result.original,
            "shrunk_faults": len(smallest.schedule.faults),
            "tries": result.tries,
            "seconds": round(result.seconds, 1),
            "minimal": result.minimal,
            "failing_run": failed.run_dir.name,
        }
        (smallest.run_dir / SHRINK_FILE).write_text(json.dumps(facts, indent=2) + "\n")
    return result


def starts(faults: tuple[Fault, ...]) -> tuple[float, ...]:
    return tuple(sorted(fault.start for fault in faults))
