"""The nemesis's cluster (SPEC.md section 21): 3 nodes that carry every fault hook this
machine has at once, and how each fault of a schedule is applied and healed on it.

The hooks: each node in a network namespace of its own with its links through
Toxiproxy (`slow`, `cut`), its wall clock under libfaketime (`clock`), and its data
folder on the power-loss filesystem mounted as a volume of fixed size (`power`, and
`disk`: the volume filled with a ballast file, as section 20 fills its own volumes);
`kill` and `pause` need only signals.

A fault is healed before the next begins, so that two nodes, a quorum, are whole
throughout. A node that cannot be made whole again (it does not restart on its data, or
takes no write once its disk is freed and it is restarted) is the implementation's
failure, not the kit's: `apply` raises `NotHealed` saying so, and the run stops its
schedule there.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from dht.conformance.faults import (
    BOUND,
    RESUME_SECONDS,
    VOLUME_BYTES,
    Recorder,
    describe,
    stored,
    write_until_stored,
)
from dht.conformance.http_client import status_code
from dht.conformance.launcher import Cluster, Node, NodeNotReady
from dht.conformance.nemesis_schedule import Fault
from dht.testbed import fake_clock
from dht.testbed.fake_clock import FakeClock
from dht.testbed.netns import NetnsTestbed, netns_unavailable
from dht.testbed.power_loss import PowerLossMount, mount, power_loss_unavailable
from dht.testbed.toxiproxy import Link, free_ports, node_name


class NotHealed(Exception):
    """A node the kit could not make whole again after a fault: the message says which
    and why, in one line."""


def unavailable_kinds() -> dict[str, str]:
    """The kinds of fault this machine cannot apply, each with the reason."""
    reasons: dict[str, str] = {}
    if (why := netns_unavailable()) is not None:
        reasons["slow"] = reasons["cut"] = f"link faults need network namespaces: {why}"
    if (why := fake_clock.unavailable()) is not None:
        reasons["clock"] = f"clock faults need a fake clock: {why}"
    if (why := power_loss_unavailable()) is not None:
        reasons["power"] = f"a power cut needs the lazy filesystem: {why}"
        reasons["disk"] = f"a full disk needs the lazy filesystem's fixed capacity: {why}"
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
            if "power" not in self.left_out or "disk" not in self.left_out:
                log = self.root / f"filesystem-{index}.log"
                backing = self.root / f"backing-{index}"
                self.mounts.append(mount(backing, node.data_dir, log, capacity=VOLUME_BYTES))
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

    def links(self, fault: Fault) -> list[Link]:
        assert self.testbed is not None
        into, out_of = self.testbed.links_into(fault.node), self.testbed.links_out_of(fault.node)
        direction = fault.parameters.get("direction", "both")
        return {"into": into, "out of": out_of}.get(direction, [*into, *out_of])

    def apply(self, fault: Fault, recorder: Recorder, keys: Sequence[str]) -> str:
        """Applies `fault`, lets it last its duration, and heals it: a killed node is
        back once it answers /v0/status again, a full disk once a write through its node
        is stored (`keys` are what such writes may use). Returns '' or a problem the
        node came back from (it stopped answering while its disk was full); raises
        NotHealed when it did not come back."""
        node = self.nodes[fault.node]
        if fault.kind in ("kill", "power"):
            node.kill()
            if fault.kind == "power":
                self.mounts[fault.node].power_cut()
            time.sleep(fault.duration)
            restart(node, f"{node_name(fault.node)} after {fault.label()}")
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
        elif fault.kind == "disk":
            return self.fill_disk(fault, recorder, keys)
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")
        return ""

    def fill_disk(self, fault: Fault, recorder: Recorder, keys: Sequence[str]) -> str:
        """Section 20's fault on the nemesis's node: its volume full for the fault's
        duration, then freed; a write through it must then be stored within
        RESUME_SECONDS, or after a restart on its data within the bound."""
        node, name = self.nodes[fault.node], node_name(fault.node)
        volume = self.mounts[fault.node]
        try:
            volume.fill()
            time.sleep(fault.duration)
            alive = node.running and status_code(node.url) == 200
        finally:
            volume.free()
        problem = "" if alive else f"{name} stopped answering /v0/status while its disk was full"
        if stored(write_until_stored(recorder, node, keys, RESUME_SECONDS)):
            return problem
        with recorder.fault(f"restart {name} on its data"):
            node.kill()
            restart(node, f"{name} after its disk was full")
        last = write_until_stored(recorder, node, keys, BOUND)
        if not stored(last):
            raise NotHealed(
                f"{name} took no write after its disk was freed and a restart: {describe(last)}"
            )
        return problem


def restart(node: Node, what: str) -> None:
    """Starts `node` again on its data; NotHealed, naming `what`, if it does not answer
    /v0/status within the kit's start deadline."""
    node.start(wait=False)
    try:
        node.wait_ready()
    except NodeNotReady as exc:
        raise NotHealed(f"{what}, it did not restart on its data: {first_line(exc)}") from exc


def first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
