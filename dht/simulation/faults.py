"""The nemesis of a simulated run: faults drawn from the seed, each applied for a while
and healed, a few at a time, until the load ends; then everything is healed at once.

- partition: a node cut off from the others both ways, or one direction of one link
  (bytes held, as TCP holds them, until it heals);
- reset: every connection between two nodes reset at once (a middlebox's RST);
- slow link: one direction's delay raised to 50-900 ms (near the 1 s deadline);
- pause: a node's process stopped (SIGSTOP): its callbacks held, its timers late;
- crash: kill -9, the disk keeping only what it synced, and a restart after a while
  from what it kept;
- ahead-then-crash: a node's clock carried ahead (within the drift bound) for a few
  seconds, stepped back to true time, and the node crashed at once and restarted: the
  schedule of "a restart after a clock was carried ahead";
- power: every node's power cut at once (each disk keeping what it synced), all back
  after a while, one by one;
- clock: a node's wall clock stepped (forward or back) to an offset from true time,
  mostly small, sometimes past the drift bound so the fence has work to do;
- grow, shrink (`MEMBERSHIP_KINDS`, drawn only when asked for): a spare node started
  to join, or a member removed, by dht's own driver of a membership change
  (`dht.simulation.operator`), while the clients run and the other faults strike; a
  change the driver stops (a node silent too long) is run again until it is through.
  One change at a time; a removed node is stopped once the change is through.
- behind-then-cut (`CLOCK_KINDS`, drawn only when asked for): a node's clock stepped
  behind (1.0-1.9 s, within the drift bound, so the fence lets it serve), then the node
  cut off from the others for longer than a tombstone's grace: a delete it coordinated
  while it had heard no newer version has a version older than its arrival at the other
  replicas. Made to find the defect `tombstone-by-version-time`, which it does not:
  the lag is under the drift bound, shorter than an exchange's period.
- restart-skewed (`CLOCK_KINDS`, drawn only when asked for): a node crashed and
  restarted with its wall clock minutes off, ahead or behind (15 s to 2 min: a machine
  booted from a wrong hardware clock), and stepped back to true time 10-40 s later (as
  NTP would). Its peers answer its first look, so the fence keeps it from coordinating
  (SPEC 9.13): it issues no version while off, and behind, it refuses its peers'
  versions as too far ahead. It stays a replica: ahead, every record reaching it
  arrives, by its clock, minutes after its version's time, as a delete from a
  coordinator minutes behind would (a lag no serving coordinator has: the fence holds
  those to the drift bound, 2 s here, under an exchange's period). That is what finds
  the defect `tombstone-by-version-time`.
  It runs alone, on three members or more: it waits for the faults under way (and a
  membership change) to end, and no other starts until its clock is back.
- restart-skewed-amid (`CLOCK_KINDS`, drawn only when asked for): the same, amid the
  other faults and on any number of members. It found a defect of dht's: with a peer
  silent (down, paused, cut off) at the node's look, or with two members, a majority
  could not see its clock off and it served with it; its writes, refused by its peers
  as too far ahead (504), stayed in its own storage with versions minutes ahead and,
  once real time reached them, won over every write acknowledged since. The clock
  fence now holds the node ahead where the nodes that answered split evenly (SPEC.md
  rule 9.13; seed 4 in tests/simulation).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Sequence

from dht.membership.driver import ChangeFailed, change_membership
from dht.simulation.loop import VirtualLoop
from dht.simulation.network import Network, Trace
from dht.simulation.operator import OPERATOR, OperatorSession
from dht.simulation.sim_node import SimNode

KINDS = (
    "partition",
    "one-way",
    "slow",
    "reset",
    "pause",
    "crash",
    "clock",
    "ahead-then-crash",
    "power",
)
MEMBERSHIP_KINDS = ("grow", "shrink")
CLOCK_KINDS = ("behind-then-cut", "restart-skewed", "restart-skewed-amid")
# How far off a `restart-skewed` clock is, either way, and for how long: past the drift
# bound and a tombstone's grace plus an exchange's period (seconds).
SKEWED_BY = (15.0, 120.0)
SKEWED_FOR = (10.0, 40.0)
# The fewest members among which one clock off, either way, is fenced: with two, the
# node behind is not (SPEC 9.13: only the node ahead is, where the two split).
FENCED_FROM = 3
# The fewest members a shrink leaves.
FEWEST_MEMBERS = 2
# Seconds before a change the driver stopped is run again.
CHANGE_AGAIN = 1.0
# Mean seconds between two faults, and the most under way at once.
MEAN_GAP = 2.0
AT_ONCE = 2


class Nemesis:
    def __init__(
        self,
        nodes: Sequence[SimNode],
        network: Network,
        loop: VirtualLoop,
        rng: random.Random,
        trace: Trace,
        kinds: Sequence[str] = KINDS,
        spares: Sequence[SimNode] = (),
    ) -> None:
        """`kinds`: the faults drawn from (a shrink leaves some out); `nodes`: the
        members, a list the clients share (a change adds to it and takes from it);
        `spares`: nodes not started yet, which a grow adds."""
        self._nodes = nodes if isinstance(nodes, list) else list(nodes)
        self._spares = list(spares)
        self._everyone = [*self._nodes, *self._spares]
        self._session = OperatorSession(network, self._everyone)
        self._change: asyncio.Task[None] | None = None
        # With membership changes, the links to and from the driver's host are cut,
        # slowed and reset like the others: a node the driver cannot reach stays a step
        # behind while clients use it.
        self._operator_links = any(kind in MEMBERSHIP_KINDS for kind in kinds)
        self._kinds = tuple(kinds)
        self._network = network
        self._loop = loop
        self._rng = rng
        self._trace = trace
        self.log: list[str] = []
        self._busy: set[str] = set()  # nodes with a process or clock fault under way
        self._cut: set[tuple[str, str]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._alone = False  # a fault that runs alone is under way
        self.sizes = {len(self._nodes)}  # of every node list the membership had

    def _note(self, text: str) -> None:
        line = f"t={self._loop.time():.3f} {text}"
        self.log.append(line)
        self._trace.add("fault", line)

    async def run(self, until: float) -> None:
        loop = self._loop
        while True:
            await asyncio.sleep(self._rng.expovariate(1 / MEAN_GAP))
            if loop.time() >= until:
                return
            self._tasks = [task for task in self._tasks if not task.done()]
            if len(self._tasks) >= AT_ONCE:
                continue
            kind = self._rng.choice(self._kinds)
            self._tasks.append(loop.create_task(self._apply(kind, until)))

    async def _apply(self, kind: str, until: float) -> None:
        rng = self._rng
        if self._alone:
            return
        if kind in ("restart-skewed", "restart-skewed-amid"):
            await self._restart_skewed(alone=kind == "restart-skewed")
            return
        if kind in MEMBERSHIP_KINDS:
            if self._change is None or self._change.done():
                self._change = self._loop.create_task(self._membership_change(kind))
            return
        free = [node for node in self._nodes if node.name not in self._busy]
        if not free:
            return
        if kind == "power":
            await self._power_cut(rng.uniform(0.5, 5.0))
            return
        node = rng.choice(free)
        others = [other.name for other in self._nodes if other is not node]
        if self._operator_links:  # the operator's host is on the network too
            others.append(OPERATOR)
        # Most faults are short; one in five outlasts a hint's age and a tombstone's grace.
        longest = 30.0 if rng.random() < 0.2 else 10.0
        duration = min(rng.uniform(0.5, longest), max(until - self._loop.time(), 0.1))
        if kind == "partition":
            links = [(node.name, other) for other in others] + [
                (other, node.name) for other in others
            ]
            await self._cut_for(links, duration, f"partition {node.name} from the others")
        elif kind == "one-way":
            link = (node.name, rng.choice(others))
            if rng.random() < 0.5:
                link = (link[1], link[0])
            await self._cut_for([link], duration, f"cut {link[0]} -> {link[1]}")
        elif kind == "slow":
            src, dst = node.name, rng.choice(others)
            slowed = self._network.link(src, dst)
            slow = rng.uniform(0.05, 0.9)
            self._note(f"slow {src} -> {dst} to {slow * 1000:.0f} ms for {duration:.1f} s")
            slowed.base = slow
            await asyncio.sleep(duration)
            slowed.base = self._network.base_delay
            self._note(f"slow {src} -> {dst} healed")
        elif kind == "reset":
            other = rng.choice(others)
            count = self._network.reset(node.name, other)
            self._note(f"reset {count} connections between {node.name} and {other}")
        elif kind == "pause":
            self._busy.add(node.name)
            self._note(f"pause {node.name} for {duration:.1f} s")
            self._pause(node)
            await asyncio.sleep(duration)
            self._resume(node)
            self._note(f"resume {node.name}")
            self._busy.discard(node.name)
        elif kind == "crash":
            self._busy.add(node.name)
            self._note(f"crash {node.name}, down {duration:.1f} s")
            node.crash()
            await asyncio.sleep(duration)
            self._note(f"restart {node.name}")
            node.start()
            self._busy.discard(node.name)
        elif kind == "ahead-then-crash":
            self._busy.add(node.name)
            ahead = rng.uniform(0.5, 1.9)
            self._note(f"clock of {node.name} stepped to {ahead * 1000:+.0f} ms")
            self._set_offset(node, ahead)
            await asyncio.sleep(rng.uniform(1.0, 5.0))
            self._set_offset(node, 0.0)
            down = rng.uniform(0.1, 0.5)
            self._note(f"clock of {node.name} back to true time; crash, down {down:.1f} s")
            node.crash()
            await asyncio.sleep(down)
            self._note(f"restart {node.name}")
            node.start()
            self._busy.discard(node.name)
        elif kind == "behind-then-cut":
            self._busy.add(node.name)
            behind = -rng.uniform(1.0, 1.9)
            self._note(f"clock of {node.name} stepped to {behind * 1000:+.0f} ms")
            self._set_offset(node, behind)
            await asyncio.sleep(rng.uniform(0.5, 5.0))
            links = [(node.name, other) for other in others] + [
                (other, node.name) for other in others
            ]
            cut = rng.uniform(12.0, 30.0)
            await self._cut_for(links, cut, f"partition {node.name} from the others")
            self._set_offset(node, 0.0)
            self._note(f"clock of {node.name} back to true time")
            self._busy.discard(node.name)
        elif kind == "clock":
            self._busy.add(node.name)
            offset = rng.uniform(-0.3, 0.3) if rng.random() < 0.7 else rng.uniform(-4.0, 4.0)
            self._note(f"clock of {node.name} stepped to {offset * 1000:+.0f} ms")
            self._set_offset(node, offset)
            await asyncio.sleep(duration)
            self._set_offset(node, 0.0)
            self._note(f"clock of {node.name} back to true time")
            self._busy.discard(node.name)

    async def _restart_skewed(self, alone: bool) -> None:
        """`restart-skewed`: once every other fault (a membership change too) is over,
        one node crashed and restarted with its clock minutes off, the only fault until
        it is back to true time. Not `alone` (`restart-skewed-amid`): at once, among
        the other faults, on any number of members."""
        self._alone = self._alone or alone
        try:
            others = [task for task in self._tasks if task is not asyncio.current_task()]
            if self._change is not None:
                others.append(self._change)
            if others and alone:
                await asyncio.wait(others)  # not gather: a cancel must not reach them
            if alone and len(self._nodes) < FENCED_FROM:
                return
            candidates = [node for node in self._nodes if node.name not in self._busy]
            if not candidates:
                return
            node = self._rng.choice(candidates)
            self._busy.add(node.name)
            off = self._rng.uniform(*SKEWED_BY) * self._rng.choice((-1.0, 1.0))
            down = self._rng.uniform(0.5, 5.0)
            self._note(f"crash {node.name}, down {down:.1f} s")
            node.crash()
            await asyncio.sleep(down)
            self._set_offset(node, off)
            self._note(f"restart {node.name}, its clock at {off:+.1f} s")
            node.start()
            await asyncio.sleep(self._rng.uniform(*SKEWED_FOR))
            self._set_offset(node, 0.0)
            self._note(f"clock of {node.name} stepped back to true time")
            self._busy.discard(node.name)
        finally:
            if alone:  # an `-amid` one ending must not lift the hold of one alone
                self._alone = False

    async def _membership_change(self, kind: str) -> None:
        members = [node.config.self_url for node in self._nodes]
        if kind == "grow":
            if not self._spares:
                return
            spare = self._spares.pop(0)
            new = [*members, spare.config.self_url]
            spare.config = dataclasses.replace(spare.config, cluster=tuple(new), join=True)
            self._note(f"grow: {spare.name} joins")
            spare.start()
            self._nodes.append(spare)
        else:
            if len(members) <= FEWEST_MEMBERS:
                return
            # Two at once where three stay (5 -> 3: the lists' default quorums differ most).
            count = self._rng.choice((1, 2)) if len(members) - 2 > FEWEST_MEMBERS else 1
            if count == 1:
                leaving = [self._rng.choice(self._nodes)]
            else:
                leaving = self._rng.sample(self._nodes, count)
            names = {node.config.self_url for node in leaving}
            new = [url for url in members if url not in names]
            self._note(f"shrink: {', '.join(node.name for node in leaving)} leaves")
        self.sizes.add(len(new))
        while True:
            try:
                await change_membership(
                    members,
                    new,
                    session=self._session,  # type: ignore[arg-type]
                )
                break
            except ChangeFailed as exc:
                if "nothing to change" in str(exc):
                    break
                self._note(f"{kind}: the driver stopped ({str(exc)[:80]}); again")
                await asyncio.sleep(CHANGE_AGAIN)
        for node in [node for node in self._nodes if node.config.self_url not in new]:
            self._nodes.remove(node)
            self._busy.add(node.name)  # out of the cluster: no fault of its own any more
            node.crash()
        self._note(f"{kind}: through, members {', '.join(node.name for node in self._nodes)}")

    async def _power_cut(self, duration: float) -> None:
        """Only when no node has a fault of its own under way. Restarts the nodes it cut,
        and only those still members: a grow may start its spare while they come back
        one by one (a second start would run two processes of it at once), and a shrink
        stops the node it takes out."""
        if self._busy:
            return
        cut = list(self._nodes)
        names = {node.name for node in cut}
        self._busy |= names
        self._note(f"power cut on every node for {duration:.1f} s")
        for node in cut:
            node.crash()
        await asyncio.sleep(duration)
        for node in cut:
            if node not in self._nodes:
                continue
            self._note(f"restart {node.name}")
            node.start()
            await asyncio.sleep(self._rng.uniform(0.0, 0.5))
        self._busy -= names

    async def _cut_for(self, links: list[tuple[str, str]], duration: float, what: str) -> None:
        links = [link for link in links if link not in self._cut]
        if not links:
            return
        self._note(f"{what} for {duration:.1f} s")
        for src, dst in links:
            self._cut.add((src, dst))
            self._network.cut(src, dst, True)
        await asyncio.sleep(duration)
        for src, dst in links:
            self._cut.discard((src, dst))
            self._network.cut(src, dst, False)
        self._note(f"{what}: healed")

    def _pause(self, node: SimNode) -> None:
        if node.incarnation is not None:
            self._loop.pause(node.incarnation)

    def _resume(self, node: SimNode) -> None:
        if node.incarnation is not None:
            self._loop.resume(node.incarnation)

    def _set_offset(self, node: SimNode, offset: float) -> None:
        node.clock_offset = offset
        if node.incarnation is not None:
            node.incarnation.clock_offset = offset

    async def heal_all(self) -> None:
        """Ends every fault under way: each heals as it would have, at once."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for src, dst in list(self._cut):
            self._network.cut(src, dst, False)
        self._cut.clear()
        names = [node.name for node in self._nodes]
        hosts = [*names, OPERATOR] if self._operator_links else names
        for node in self._nodes:
            for other in hosts:
                self._network.link(node.name, other).base = self._network.base_delay
                self._network.link(other, node.name).base = self._network.base_delay
            if node.incarnation is not None and node.incarnation.paused:
                self._resume(node)
            if not node.up:
                node.start()
            self._set_offset(node, 0.0)
        self._busy.clear()
        self._note("healed everything")
        if self._change is not None:
            await self._change  # with every node up, the driver goes through

    @property
    def members(self) -> list[SimNode]:
        return list(self._nodes)
