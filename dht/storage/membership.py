"""The membership a node places keys by, as it moves through a change: the persisted
`TopologyState`, the rings built from it, and who wants to hear of a new step.

The state lives in `topology.json` in the data folder, written before a step is
acknowledged (write to a temporary file, fsync, rename), so a node killed in the middle of
a change comes back in the phase it had reached, not in the one its `--cluster` flag
describes. `--cluster` only seeds a data folder that has no state yet.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from dht.model.topology import JOINT, STABLE, Topology, TopologyState
from dht.storage.disk import replace_durably

log = logging.getLogger(__name__)

STATE_FILE = "topology.json"


class Membership:
    def __init__(self, data_dir: Path, seed: TopologyState, vnodes: int) -> None:
        self._path = data_dir / STATE_FILE
        self._vnodes = vnodes
        saved = load_state(self._path)
        if saved is None:
            self.state = seed
            save_state(self._path, seed)
        else:
            self.state = saved
            if not saved.same_step(seed) and seed.phase == STABLE:
                log.warning(
                    "the data folder's membership (%s of %s) differs from --cluster; "
                    "the data folder's wins: change membership with `python -m dht cluster "
                    "add/remove` or the topology request, not by restarting with a new list",
                    saved.phase,
                    ", ".join(sorted(saved.members)),
                )
        self.topology: Topology = self.state.placement(vnodes)

    @property
    def phase(self) -> str:
        return self.state.phase

    @property
    def identity(self) -> str:
        """The identities of the rings in use, comma-separated: two nodes may replicate
        for each other when they share one (`shares_ring`)."""
        return ",".join(ring.identity for ring in self.topology.rings)

    def shares_ring(self, identity: str) -> bool:
        theirs = set(identity.split(","))
        return any(ring.identity in theirs for ring in self.topology.rings)

    def apply(self, proposed: TopologyState) -> bool:
        """Moves to `proposed` if it is this state again or the step after it (raises
        BadTransition otherwise); says whether anything changed. Persisted first."""
        taken = self.state.successor(proposed)
        if self.state.same_step(taken):
            more_dead = taken.dead != self.state.dead  # a node lost mid-change
            drained = taken.draining != self.state.draining  # the change closed, or nearer
            if taken != self.state:  # also: a joining node learns the count, who left
                save_state(self._path, taken)
                self.state = taken
            if more_dead:
                log.info("membership: %s gone for good", ", ".join(taken.dead) or "none")
            if drained:
                log.info(
                    "membership: %s",
                    "the change is closed: tombstone collection starts again"
                    if taken.closed
                    else "still draining: " + ", ".join(taken.draining or ()),
                )
            return more_dead or drained
        save_state(self._path, taken)
        self.state = taken
        self.topology = taken.placement(self._vnodes)
        log.info(
            "membership: now %s (epoch %d) with %s%s%s",
            taken.phase,
            taken.epoch,
            ", ".join(sorted(taken.current)),
            "" if taken.next is None else " -> " + ", ".join(sorted(taken.next)),
            ""
            if taken.closed
            else "; tombstone collection waits until the change is closed (draining: "
            + ", ".join(taken.draining or ())
            + ")",
        )
        return True


def joining_state(cluster: tuple[str, ...], self_url: str) -> TopologyState:
    """The first state of a node started with `--join`: the cluster it joins (every
    other entry of `--cluster`) changing to one with it, in the joint phase."""
    others = tuple(url for url in cluster if url != self_url)
    return TopologyState(0, JOINT, others, cluster)


def load_state(path: Path) -> TopologyState | None:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    return TopologyState.from_json(data)


def save_state(path: Path, state: TopologyState) -> None:
    save_json(path, state.to_json())


def save_json(path: Path, data: Any) -> None:
    """Replaces `path` with `data` as JSON, durably: a crash leaves the old file or the
    new one, never a mix."""
    replace_durably(path, json.dumps(data).encode())
