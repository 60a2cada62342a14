"""One graded run of an adapter's store: concurrent clients on a few keys (and, with
`write_once`, on fresh keys each written once, so that no later write hides a lost
one), a seeded nemesis that kills and restarts, pauses and resumes, cuts off and heals,
steps the wall clock of, or cuts the power of one member at a time and sets it right
again, then, with every member back, a final read of each key; the history judged by
the history checker (acknowledged writes lost, reads stale, values from nowhere) and by
the linearizability checker, whose verdict decides only for a store that promises
linearizability.

The run is the kit's for a store it does not know: the same clients (`traffic.Clients`),
the same checkers, the verdicts in the course API's terms. A seed fixes the clients'
draws and the nemesis's schedule; the timing of real processes does the rest.
"""

from __future__ import annotations

import importlib.util
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dht.conformance.adapters.store import Partitionable, Powerable, Skewable, Store
from dht.conformance.adapters.write_once import WriteOnce, sender
from dht.conformance.traffic import Clients, Mix, key_space
from dht.history.checker import CLOCK_SLACK, check
from dht.history.linearizability import LinearizabilityReport, check_linearizable
from dht.history.operation import Kind, Op
from dht.history.verdict import Report

CLIENTS = 5
KEYS = 3
CLIENT_TIMEOUT = 5.0
# Every operation is a PUT, DELETE or GET of the course API; no expiring PUTs (a store
# may have no per-key time to live).
MIX = Mix(put=0.5, delete=0.1, expiring=0.0)
# A fault lasts this long, and the store has this long between two (seconds).
FAULT_FOR = (1.0, 3.0)
BETWEEN_FAULTS = (0.5, 2.0)
# A partition lasts longer: cut off for less than a store's failure detection and
# election (etcd's 1 s election timeout; Sentinel's 0.5 s, then a vote, then a promotion
# it confirms once a second) it is a slow link more than a split, and a failover a heal
# cuts short is not tried again for a while (Sentinel: twice its failover timeout).
PARTITION_FOR = (2.0, 5.0)
# A member's wall clock is this far off the true time (seconds, negative: behind), one
# drawn per clock fault: from a few seconds (more than Sentinel's 2 s between two looks
# at its clock, which it takes for a stall or a step) to minutes (more than Redis's 60 s
# replication timeout). It stays off as long as a partition lasts.
CLOCK_OFFSETS = (-120.0, -30.0, -5.0, 5.0, 30.0, 120.0)
CLOCK_FOR = PARTITION_FOR
# The faults the nemesis draws among, as `--faults` names them: a member killed with
# SIGKILL and restarted on its data, paused with SIGSTOP and resumed, cut off from the
# other members by a network partition (the clients still reach it) and healed, its
# wall clock stepped ahead or behind and set true again, or its power cut (every process
# of it killed with SIGKILL at once, what its data folder had not fsynced dropped) and
# restarted on what is left. A power cut is out as long as a kill (FAULT_FOR).
FAULTS = ("kill", "pause", "partition", "clock", "power")
# Those drawn unless `--faults` says otherwise: without clock and power faults, a seed
# draws the schedule it drew before they existed (and the verdicts measured then stand).
DEFAULT_FAULTS = ("kill", "pause", "partition")
# How long the final read of a key retries while the store has no answer (a leader
# still being elected after the last fault).
FINAL_DEADLINE = 20.0


@dataclass
class AdapterRun:
    store: str
    promise: str
    seed: int
    seconds: float
    history: list[Op]
    faults: list[str] = field(default_factory=list)
    # The faults asked for that the nemesis could not draw, each with why.
    not_drawn: list[str] = field(default_factory=list)
    report: Report | None = None
    linearizability: LinearizabilityReport | None = None
    # With `--write-once`: the fresh keys written (each read at the end), else None.
    write_once_keys: int | None = None

    @property
    def ok(self) -> bool:
        """The history checker passed it, and so did the linearizability checker where
        the store promises linearizability."""
        if self.report is None or not self.report.ok:
            return False
        if self.promise != "linearizable":
            return True
        return self.linearizability is not None and self.linearizability.ok

    def summary(self) -> str:
        lines = [
            f"{self.store} (promises: {self.promise}), seed {self.seed}, {self.seconds:g} s, "
            f"{len(self.faults)} faults: {'PASS' if self.ok else 'FAIL'}",
        ]
        lines += [f"  not drawn: {why}" for why in self.not_drawn]
        if self.write_once_keys is not None:
            lines.append(f"  write-once: {self.write_once_keys} keys, each read at the end")
        if self.report is not None:
            lines.append(f"  history: {self.report.summary()}")
        if self.linearizability is not None:
            lines.append(f"  linearizability: {self.linearizability.line()}")
        return "\n".join(lines)

    def details(self) -> str:
        parts = []
        if self.report is not None and not self.report.ok:
            parts.append(self.report.details())
        if self.linearizability is not None and not self.linearizability.ok:
            parts.append(self.linearizability.details())
        return "\n".join(parts)


def run_store(
    store: Store,
    seconds: float,
    seed: int,
    at_leader: bool = False,
    faults: Sequence[str] = DEFAULT_FAULTS,
    write_once: bool = False,
) -> AdapterRun:
    """Starts `store`, runs the clients and the nemesis for `seconds`, heals, reads every
    key, stops the store and judges the history. `at_leader`: every fault strikes the
    member that leads then, rather than one drawn at random. `faults`: those the nemesis
    draws among (of `FAULTS`), less those the store cannot suffer here; ValueError if
    that leaves none. `write_once`: a share of the clients' operations are PUTs of
    fresh keys, each written once and read at the end (`write_once.WriteOnce`)."""
    keys = key_space(KEYS)
    members = list(range(len(store.members)))
    run = AdapterRun(store.name, store.promise, seed, seconds, [])
    kinds = _drawable(store, faults, run.not_drawn)
    try:
        store.start()
        _drop_unreached_clocks(store, kinds, run.not_drawn)
        once = WriteOnce(seed, CLIENTS, seconds, time.monotonic) if write_once else None
        clients = Clients(
            members, keys, CLIENTS, seed, CLIENT_TIMEOUT, MIX, sender(store.attempt, once)
        )
        clients.start()
        try:
            until = time.monotonic() + seconds
            _nemesis(store, random.Random(seed), until, run.faults, at_leader, kinds)
        finally:
            history = clients.stop()
        read = keys if once is None else keys + once.keys()
        run.write_once_keys = None if once is None else len(read) - len(keys)
        final, reads = _final_reads(store, read)
        run.history = history + reads
    finally:
        store.stop()
    run.report = check(run.history, final, CLOCK_SLACK)
    run.linearizability = check_linearizable(run.history)
    return run


# The faults an adapter may lack: each kind, the protocol its store must meet, what it
# then lacks (as the run says it), and the method that says whether this machine can
# strike it (None) or why not, asked before the store starts.
_OPTIONAL_FAULTS: tuple[tuple[str, type, str, str], ...] = (
    ("partition", Partitionable, "partition(i) and heal(i)", "prepare_partitions"),
    ("clock", Skewable, "step_clock(i, seconds)", "prepare_clocks"),
    ("power", Powerable, "power_cut(i)", "prepare_power"),
)


def _drawable(store: Store, wanted: Sequence[str], not_drawn: list[str]) -> list[str]:
    """The faults of `wanted` the nemesis can strike `store` with, in `FAULTS`'s order
    (the draw depends on it); why each other cannot be is added to `not_drawn`."""
    unknown = sorted(set(wanted) - set(FAULTS))
    if unknown or not wanted:
        named = f"not {', '.join(unknown)}" if unknown else "none given"
        raise ValueError(f"faults are among {', '.join(FAULTS)} ({named})")
    kinds = [kind for kind in FAULTS if kind in wanted]
    for kind, protocol, lacking, prepare in _OPTIONAL_FAULTS:
        if kind not in kinds:
            continue
        if isinstance(store, protocol):
            why = getattr(store, prepare)()
        else:
            why = f"{store.name}'s adapter has no {lacking}"
        if why is not None:
            kinds.remove(kind)
            not_drawn.append(f"{kind}: {why}")
    if not kinds:
        raise ValueError(f"no fault the nemesis can draw: {'; '.join(not_drawn)}")
    return kinds


def _drop_unreached_clocks(store: Store, kinds: list[str], not_drawn: list[str]) -> None:
    """Clock faults dropped from `kinds` once the store runs, if a step would not reach
    every member's processes (what only running processes tell): the run says why."""
    if "clock" not in kinds:
        return
    assert isinstance(store, Skewable)
    why = store.clocks_unreached()
    if why is None:
        return
    kinds.remove("clock")
    not_drawn.append(f"clock: {why}")
    if not kinds:
        raise ValueError(f"no fault the nemesis can draw: {'; '.join(not_drawn)}")


def _nemesis(
    store: Store,
    rng: random.Random,
    until: float,
    faults: list[str],
    at_leader: bool,
    kinds: Sequence[str],
) -> None:
    """One fault of `kinds` at a time on one member, each healed before the next: kill
    -9 then a restart on its data, a pause (SIGSTOP) then a resume, a partition that
    cuts the member off from the others then heals, its wall clock stepped then set
    true, or its power cut then a restart on what its disk kept. The draws are those of
    the runs before partitions, clock steps and power cuts were among the faults (a
    clock fault's offset is drawn only for it, a power cut draws nothing of its own):
    with kill and pause alone, a seed still draws the schedule it drew then, with kill,
    pause and partition the one it drew before clock faults, and with those and clock
    the one it drew before power cuts."""
    t0 = time.monotonic()
    while time.monotonic() < until:
        time.sleep(rng.uniform(*BETWEEN_FAULTS))
        if time.monotonic() >= until:
            break
        index = rng.randrange(len(store.members))  # drawn always: the schedule stays
        leader = store.leader() if at_leader else None
        index = index if leader is None else leader
        drawn = rng.random()  # the fault's length, as a fraction of its kind's range
        at = time.monotonic() - t0
        which = f"m{index}" + (" (the leader)" if leader is not None else "")
        kind = kinds[int(rng.random() * len(kinds))]
        shortest, longest = {"partition": PARTITION_FOR, "clock": CLOCK_FOR}.get(kind, FAULT_FOR)
        lasting = shortest + (longest - shortest) * drawn  # as random.uniform computes it
        if kind == "kill":
            faults.append(f"{at:.1f} s: kill -9 {which}, restarted {lasting:.1f} s later")
            store.kill(index)
            time.sleep(lasting)
            store.restart(index)
        elif kind == "pause":
            faults.append(f"{at:.1f} s: pause {which} for {lasting:.1f} s")
            store.pause(index)
            time.sleep(lasting)
            store.resume(index)
        elif kind == "power":
            assert isinstance(store, Powerable)
            lost = store.power_cut(index)
            faults.append(
                f"{at:.1f} s: power cut {which} ({lost.bytes} unsynced bytes in {lost.files} "
                f"files dropped), restarted {lasting:.1f} s later"
            )
            time.sleep(lasting)
            store.restart(index)
        elif kind == "partition":
            assert isinstance(store, Partitionable)
            faults.append(f"{at:.1f} s: partition {which} from the others for {lasting:.1f} s")
            store.partition(index)
            try:
                time.sleep(lasting)
            finally:
                store.heal(index)
        else:
            assert isinstance(store, Skewable)
            offset = rng.choice(CLOCK_OFFSETS)
            faults.append(f"{at:.1f} s: clock of {which} {offset:+.0f} s for {lasting:.1f} s")
            store.step_clock(index, offset)
            try:
                time.sleep(lasting)
            finally:
                store.step_clock(index, 0.0)


def _final_reads(store: Store, keys: list[str]) -> tuple[dict[str, bytes | None], list[Op]]:
    """Each key's value once every member is back, read through member 0 until it
    answers: the final state, and the reads as ops of the history."""
    final: dict[str, bytes | None] = {}
    reads = []
    for key in keys:
        deadline = time.monotonic() + FINAL_DEADLINE
        while True:
            op = store.attempt(0, Kind.GET, key, None, CLIENT_TIMEOUT, "m0")
            if op.status in (200, 404):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{store.name}: no final read of {key} in {FINAL_DEADLINE} s")
            time.sleep(0.2)
        final[key] = op.value
        reads.append(op)
    return final, reads


# The stores there is an adapter for, and what each is.
ADAPTERS = {
    "etcd": "etcd 3.4, 3 members, reads linearizable (etcd's default)",
    "etcd-serializable": "the same, reads serializable: answered by the member asked, "
    "from what it has applied (etcd documents them as possibly stale)",
    "redis": "Redis 7.0, a primary, 2 asynchronous replicas and 3 sentinels that fail over",
    "redis-wait": "the same, every write followed by WAIT 1 (a replica has it)",
    "course-api": "3 nodes of the course API: dht's, or DHT_NODE_COMMAND's as for the kit",
}


def load_adapter(spec: str, folder: Path) -> Store:
    """A user's adapter, `FILE.py:CLASS` (`dht.conformance.adapters.example` says what
    it must have), made with `folder`."""
    path, _, class_name = spec.rpartition(":")
    if not path or not class_name:
        raise ValueError(f"--adapter wants FILE.py:CLASS, got {spec!r}")
    loaded = importlib.util.spec_from_file_location(f"dht_adapter_{Path(path).stem}", path)
    if loaded is None or loaded.loader is None or not Path(path).is_file():
        raise ValueError(f"--adapter: no Python file at {path}")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    made = getattr(module, class_name, None)
    if made is None:
        raise ValueError(f"--adapter: {path} defines no {class_name}")
    store: Store = made(folder)
    return store


def store_named(name: str, folder: Path) -> Store:
    from dht.conformance.adapters.etcd import EtcdCluster
    from dht.conformance.adapters.redis import RedisCluster

    if name not in ADAPTERS:
        raise ValueError(f"no adapter named {name!r} (there are: {', '.join(ADAPTERS)})")
    if name.startswith("redis"):
        return RedisCluster(folder, wait=name == "redis-wait")
    if name == "course-api":
        from dht.conformance.adapters.course_api import CourseApiCluster

        return CourseApiCluster(folder)
    return EtcdCluster(folder, serializable=name == "etcd-serializable")
