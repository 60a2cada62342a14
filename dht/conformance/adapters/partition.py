"""Network partitions between an adapter's members on one machine, while the kit's
clients (in the process that runs the nemesis) still reach every member: Jepsen's
classic cut, made with iptables in the root network namespace, on loopback.

Every process of member i (an etcd member; a Redis server and the sentinel beside it)
runs with the group id `GID_BASE + i` (47000 and up: nothing else on the machine should
run under those ids while a run partitions). Two chains of our own, named per run, do
the rest:

- in OUTPUT, a connection a member's process opens is marked with that member's number
  (conntrack's connmark, set on its first packet from the group id of its owner);
- in INPUT, cutting member i drops every packet of a connection opened by i to another
  member's port, and of one opened by another member to a port of i, both ways.

Why a mark on the connection rather than `--gid-owner` alone: a reply carries no owner
the OUTPUT chain can match (a SYN-ACK has none), so a rule on the sender's group id and
the peer's port would drop a replica's acknowledgements but not the stream its primary
pushes back on the replica's own connection, which then leaks for a few hundred
milliseconds. The drops are in INPUT so that a cut is silent, as on a real network: a
packet dropped in OUTPUT fails the sender's call at once (EPERM) instead.

Connections the clients open are never marked, so they are never cut. Runs at once on
one machine (the test suite's workers) share the group ids and marks, but not ports:
each run's drops name its own members' ports. Only chains this object created are ever
changed or removed, and `remove` leaves nothing of them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence

GID_BASE = 47000
# A member's connections are marked (index + 1) << 16 under this mask: up to 255
# members, clear of the low bits others use (netavark's 0x2000 on packets, say).
MARK_MASK = 0x00FF0000
MAX_MEMBERS = 255
MULTIPORT_MAX = 15  # iptables's multiport match takes at most 15 ports
IPTABLES_TIMEOUT = 30.0  # seconds; -w waits for the xtables lock


class PartitionError(RuntimeError):
    """iptables refused or failed a change; its own words are in the message."""


def member_gid(index: int) -> int:
    """The group id every process of member `index` runs with."""
    if not 0 <= index < MAX_MEMBERS:
        raise ValueError(f"member {index}: partitions count up to {MAX_MEMBERS} members")
    return GID_BASE + index


def _mark(index: int) -> str:
    return f"{(index + 1) << 16:#x}/{MARK_MASK:#x}"


def iptables(*arguments: str) -> subprocess.CompletedProcess[str]:
    """One iptables command, waiting for the xtables lock other users may hold."""
    return subprocess.run(
        ["iptables", "-w", *arguments], capture_output=True, text=True, timeout=IPTABLES_TIMEOUT
    )


def _must(*arguments: str) -> None:
    done = iptables(*arguments)
    if done.returncode != 0:
        raise PartitionError(f"iptables {' '.join(arguments)}: {done.stderr.strip()}")


def unavailable() -> str | None:
    """Why partitions cannot be made here, or None: they need root (to start members
    under group ids and to change the firewall) and an iptables with the owner,
    conntrack, connmark and multiport matches, which a probe chain tries."""
    if os.geteuid() != 0:
        return "partitions need root (iptables, members started under group ids)"
    if shutil.which("iptables") is None:
        return "partitions need iptables: apt-get install iptables"
    probe = Partitions([[1], [2]], enabled=True)
    why = None
    try:
        probe.install()
        probe.cut(0)
    except (OSError, subprocess.SubprocessError, PartitionError) as error:
        why = f"iptables cannot make partitions here: {error}"
    try:
        probe.remove()
    except (OSError, subprocess.SubprocessError, PartitionError) as error:
        why = why or f"iptables cannot remove its probe chain: {error}"
    return why


class Partitions:
    """The cuts between the members of one cluster: `ports[i]` are every port member
    i's processes listen on. An adapter holds one, and touches the firewall only once a
    run asked for partitions (`prepare`): then it starts member i's processes under
    `group(i)`, calls `install` before they start (their connections must be marked
    from the first) and `remove` once they are stopped, whatever happened."""

    def __init__(self, ports: Sequence[Sequence[int]], enabled: bool = False) -> None:
        if len(ports) > MAX_MEMBERS:
            raise ValueError(f"partitions count up to {MAX_MEMBERS} members")
        self.ports = [list(member) for member in ports]
        self.enabled = enabled
        # One name per run, at most 28 characters as iptables wants: the process and a
        # random part, as runs in one process (a test session) come and go.
        name = f"dht-cut-{os.getpid()}-{secrets.token_hex(3)}"
        self.mark_chain, self.drop_chain = f"{name}-o", f"{name}-i"
        self._installed = False
        self._cuts: dict[int, list[list[str]]] = {}

    def prepare(self) -> str | None:
        """Why this machine cannot partition the cluster, or None: it will."""
        reason = unavailable()
        self.enabled = reason is None
        return reason

    def group(self, index: int) -> int | None:
        """The group id to start member `index`'s processes under (None: any)."""
        return member_gid(index) if self.enabled else None

    def install(self) -> None:
        """Our two chains, hooked first in OUTPUT (marks) and INPUT (drops), once the
        run asked for partitions."""
        if not self.enabled:
            return
        self._installed = True  # from the first change on, `remove` has something to undo
        _must("-N", self.mark_chain)
        _must("-N", self.drop_chain)
        for index in range(len(self.ports)):
            gid = str(member_gid(index))
            _must(
                "-A", self.mark_chain, "-m", "owner", "--gid-owner", gid,
                "-m", "conntrack", "--ctstate", "NEW",
                "-j", "CONNMARK", "--set-xmark", _mark(index),
            )  # fmt: skip
        _must("-I", "OUTPUT", "1", "-j", self.mark_chain)
        _must("-I", "INPUT", "1", "-j", self.drop_chain)

    def cut(self, index: int) -> None:
        """Member `index` cut off from every other member, both ways, until `heal`."""
        if not self._installed:
            raise PartitionError("no partition before `prepare` and `install`")
        if index in self._cuts:
            return
        others = [
            port for other, ports in enumerate(self.ports) if other != index for port in ports
        ]
        rules = [_drop(index, others)]
        rules += [
            _drop(other, self.ports[index]) for other in range(len(self.ports)) if other != index
        ]
        self._cuts[index] = [rule for group in rules for rule in group]
        for rule in self._cuts[index]:
            _must("-A", self.drop_chain, *rule)

    def heal(self, index: int) -> None:
        """Member `index` joined to the others again; the connections the cut stalled
        resume, as TCP retransmits what was dropped."""
        for rule in self._cuts.pop(index, []):
            _must("-D", self.drop_chain, *rule)

    def rules(self) -> list[str]:
        """Our chains' rules as `iptables -S` lists them (none once removed)."""
        lines = []
        for chain in (self.mark_chain, self.drop_chain):
            listed = iptables("-S", chain)
            if listed.returncode == 0:
                lines += listed.stdout.splitlines()
        for hook in ("OUTPUT", "INPUT"):
            lines += [line for line in iptables("-S", hook).stdout.splitlines() if self._ours(line)]
        return lines

    def remove(self) -> None:
        """Our hooks and chains deleted, those that exist: every step is tried, then
        any failure raised."""
        if not self._installed:
            return
        self._cuts.clear()
        steps = [
            ["-D", hook, "-j", chain]
            for hook, chain in (("OUTPUT", self.mark_chain), ("INPUT", self.drop_chain))
            for line in iptables("-S", hook).stdout.splitlines()
            if line.split()[-1:] == [chain]
        ]
        for chain in (self.mark_chain, self.drop_chain):
            if iptables("-S", chain).returncode == 0:
                steps += [["-F", chain], ["-X", chain]]
        failures = []
        for step in steps:
            done = iptables(*step)
            if done.returncode != 0:
                failures.append(f"iptables {' '.join(step)}: {done.stderr.strip()}")
        self._installed = False
        if failures:
            raise PartitionError("; ".join(failures))

    def _ours(self, line: str) -> bool:
        return line.split()[-1:] in ([self.mark_chain], [self.drop_chain])


def _drop(opener: int, ports: Sequence[int]) -> list[list[str]]:
    """Rules dropping every packet, either way, of a connection member `opener`
    opened to one of `ports`."""
    match = ["-m", "connmark", "--mark", _mark(opener), "-p", "tcp", "-m", "multiport"]
    groups = [ports[at : at + MULTIPORT_MAX] for at in range(0, len(ports), MULTIPORT_MAX)]
    return [[*match, "--ports", ",".join(map(str, group)), "-j", "DROP"] for group in groups]
