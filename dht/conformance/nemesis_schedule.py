"""The nemesis's schedule as data (pure): which fault, on which node, when and for how
long, drawn from a seed, so that the same seed, length and kinds of fault give the same
schedule, and a failing run can be run again or shrunk (dht/conformance/shrink.py).

**One fault at a time**: faults follow one another with a gap between them, each on
one node, so two nodes of three (a quorum at the default `replicas`) are whole
throughout; a fault's window ends once it is healed (a killed node answers again).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

# Every kind of fault the nemesis knows, in the order they are drawn from. `kill`:
# kill -9, restart on its data after the fault's duration; `pause`: SIGSTOP, then
# SIGCONT; `slow`: every link into and out of the node delayed; `cut`: links of the
# node cut (both ways, or only into it, or only out of it); `clock`: the node's wall
# clock off by an offset, then true again; `power`: kill -9 and what was not fsynced
# dropped, restart on what the disk kept; `disk`: the node's volume filled to the last
# byte with a ballast file, then the ballast removed (and the node restarted on its data
# if it takes no write without).
KINDS = ("kill", "pause", "slow", "cut", "clock", "power", "disk")
NODES = 3
# The cluster runs this long before the first fault and after the last one healed.
LEAD_SECONDS = 2.0
TAIL_SECONDS = 2.0
# A fault's duration and the gap before the next one, in seconds (drawn uniformly).
DURATION = (2.0, 6.0)
GAP = (0.5, 2.0)
LATENCIES_MS = (500, 2000, 8000)
CUT_DIRECTIONS = ("both", "into", "out of")
CLOCK_OFFSETS = (-30.0, -10.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: from `start` seconds after the run began, for `duration` seconds, of
    `kind` on node `node` (0-based), with its parameters (`latency_ms`, `direction`,
    `offset_seconds`)."""

    start: float
    duration: float
    kind: str
    node: int
    parameters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.start + self.duration

    def label(self) -> str:
        """How the timeline and the report name it, e.g. `slow node2 (2000 ms)`."""
        node = f"node{self.node + 1}"
        if self.kind == "slow":
            return f"slow {node}'s links ({self.parameters['latency_ms']} ms)"
        if self.kind == "cut":
            return f"cut the links {self.parameters['direction']} {node}"
        if self.kind == "clock":
            return f"{node}'s clock {self.parameters['offset_seconds']:+.0f} s"
        if self.kind == "kill":
            return f"kill -9 {node}, restart"
        if self.kind == "power":
            return f"power cut {node}, restart"
        if self.kind == "disk":
            return f"disk full on {node}"
        return f"{self.kind} {node}"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A run's faults, in start order, drawn from `seed` for a run of `seconds` with
    the `kinds` this machine can apply; `left_out` says which kinds it cannot, and why."""

    seed: int
    seconds: float
    kinds: tuple[str, ...]
    faults: tuple[Fault, ...]
    left_out: Mapping[str, str] = field(default_factory=dict)

    def keeping(self, faults: Iterable[Fault]) -> Schedule:
        """The same run with only `faults` (a subset, each at its own time), ending
        TAIL_SECONDS after the last of them is due to heal: what a shrink tries, no
        longer than it must be (each client's operations are the same, fewer of them)."""
        kept = tuple(sorted(faults, key=lambda fault: fault.start))
        last = max((fault.end for fault in kept), default=LEAD_SECONDS)
        seconds = min(self.seconds, round(last + TAIL_SECONDS, 1))
        return Schedule(self.seed, seconds, self.kinds, kept, self.left_out)

    def to_json(self) -> str:
        return json.dumps(
            {
                "seed": self.seed,
                "seconds": self.seconds,
                "kinds": list(self.kinds),
                "left_out": dict(self.left_out),
                "faults": [
                    asdict(fault) | {"parameters": dict(fault.parameters)} for fault in self.faults
                ],
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        loaded = json.loads(text)
        return cls(
            int(loaded["seed"]),
            float(loaded["seconds"]),
            tuple(loaded["kinds"]),
            tuple(Fault(**fault) for fault in loaded["faults"]),
            dict(loaded.get("left_out", {})),
        )

    def describe(self) -> str:
        """One line per fault: `12.3-15.0 s  kill -9 node2, restart`."""
        return "\n".join(
            f"{fault.start:6.1f}-{fault.end:6.1f} s  {fault.label()}" for fault in self.faults
        )


def parameters_of(kind: str, rng: random.Random) -> dict[str, Any]:
    if kind == "slow":
        return {"latency_ms": rng.choice(LATENCIES_MS)}
    if kind == "cut":
        return {"direction": rng.choice(CUT_DIRECTIONS)}
    if kind == "clock":
        return {"offset_seconds": rng.choice(CLOCK_OFFSETS)}
    return {}


def draw(seed: int, seconds: float, left_out: Mapping[str, str] | None = None) -> Schedule:
    """The schedule of a run of `seconds` from `seed`, drawing from every kind not in
    `left_out` (kind -> why this machine cannot apply it). Faults follow each other,
    one node at a time, until TAIL_SECONDS before the end."""
    left_out = dict(left_out or {})
    unknown = set(left_out) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}")
    kinds = tuple(kind for kind in KINDS if kind not in left_out)
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = LEAD_SECONDS
    while kinds:
        duration = round(rng.uniform(*DURATION), 1)
        if at + duration > seconds - TAIL_SECONDS:
            break
        kind = rng.choice(kinds)
        node = rng.randrange(NODES)
        faults.append(Fault(round(at, 1), duration, kind, node, parameters_of(kind, rng)))
        at += duration + rng.uniform(*GAP)
    return Schedule(seed, seconds, kinds, tuple(faults), left_out)


def new_seed() -> int:
    """A seed for a run given none: printed in the report, so it can be run again."""
    return random.SystemRandom().randrange(1, 2**31)
