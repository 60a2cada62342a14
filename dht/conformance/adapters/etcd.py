"""etcd as a store the kit grades: a cluster of Debian's `etcd` (3.4) members on
loopback ports, each operation sent to one member through etcd's v3 JSON gateway.

What etcd promises: linearizable reads and writes (a range without `serializable` is
read through the leader's quorum, Raft orders the writes), and an acknowledged write
survives a member's kill -9 (its WAL is fsynced before the answer). A member cut off
from the others by a partition commits nothing and, with no quorum to confirm its reads,
answers none. So its history under faults must be linearizable: the kit's
linearizability checker is judged by it.

Each answer is recorded in the course API's terms, so the one history checker reads it:
a put etcd acknowledged is a PUT answered 201, a delete a DELETE answered 202, a range
a GET answered 200 with the value or 404. An error etcd answered (no leader, a request
timed out) is a 503: for a write, indeterminate, as Raft may still commit it; no answer
at all is recorded as none.

Its members' clocks cannot be stepped here: asked for clock faults, the adapter starts
them under the fake clock (`clock.Clocks`), whose own check of the running processes
finds etcd a Go program, which reads the time where libfaketime cannot reach it; the
run says so and draws the other faults.

A power cut (`power.Power`) kills the member's one process and drops what its data
folder, a mount of the lazy filesystem, had not fsynced: etcd fsyncs its WAL before it
answers a write, so its members should come back with every write they acknowledged.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import time
from pathlib import Path

from dht.conformance.adapters.clock import Clocks
from dht.conformance.adapters.partition import Partitions
from dht.conformance.adapters.power import Power
from dht.conformance.adapters.processes import Process, kill_now, send, spawn
from dht.conformance.http_client import request
from dht.history.operation import Kind, Op
from dht.testbed.page_cache import Unsynced
from dht.testbed.toxiproxy import free_ports

# How long a member may take to answer its /health once started.
START_DEADLINE = 20.0
# What a member is told of its cluster's timing: etcd's defaults (a heartbeat each
# 100 ms, an election after 1 s without one).
HEARTBEAT_MS, ELECTION_MS = 100, 1000


def etcd_binary() -> str | None:
    return shutil.which("etcd")


class EtcdMember:
    """One member: its process, its data folder and its two ports."""

    def __init__(self, name: str, folder: Path, client_port: int, peer_port: int) -> None:
        self.name = name
        self.folder = folder
        self.ports = (client_port, peer_port)
        self.client_url = f"http://127.0.0.1:{client_port}"
        self.peer_url = f"http://127.0.0.1:{peer_port}"
        self.process: Process | None = None

    def start(
        self,
        initial_cluster: str,
        group: int | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        binary = etcd_binary()
        if binary is None:
            raise FileNotFoundError("etcd not found: apt-get install etcd-server")
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder.with_suffix(".log")
        self.process = spawn([binary, *self._flags(initial_cluster)], log, group, environment)

    def _flags(self, initial_cluster: str) -> list[str]:
        flags = {
            "name": self.name,
            "data-dir": str(self.folder),
            "listen-client-urls": self.client_url,
            "advertise-client-urls": self.client_url,
            "listen-peer-urls": self.peer_url,
            "initial-advertise-peer-urls": self.peer_url,
            "initial-cluster": initial_cluster,
            "initial-cluster-state": "new",
            "initial-cluster-token": "dht-kit",
            "heartbeat-interval": str(HEARTBEAT_MS),
            "election-timeout": str(ELECTION_MS),
        }
        return [part for name, value in flags.items() for part in (f"--{name}", value)]

    def wait_healthy(self, deadline: float) -> None:
        while True:
            try:
                if request("GET", f"{self.client_url}/health", timeout=1.0).status == 200:
                    return
            except OSError:
                pass
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"etcd {self.name} exited: see {self.folder}.log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd {self.name} not healthy in time: see {self.folder}.log")
            time.sleep(0.1)

    def member_id(self, timeout: float) -> str | None:
        """Its id in the cluster, as its own status answers (None: it does not)."""
        try:
            answer = request("POST", f"{self.client_url}/v3/maintenance/status", b"{}", timeout)
        except OSError:
            return None
        if answer.status != 200:
            return None
        member_id: str | None = json.loads(answer.body).get("header", {}).get("member_id")
        return member_id

    def kill(self) -> None:
        """kill -9: the member stops at once; its data folder stays."""
        kill_now(self.process)


class EtcdCluster:
    """`size` members, started together; the kit's controls act on one at a time."""

    def __init__(self, folder: Path, size: int = 3, serializable: bool = False) -> None:
        """`serializable`: every read asks for etcd's serializable reads, answered by the
        member asked from what it has applied, without a round through the leader; etcd
        documents them as possibly stale, so no longer linearizable."""
        self.serializable = serializable
        self.name = "etcd-serializable" if serializable else "etcd"
        self.promise = "serializable reads" if serializable else "linearizable"
        ports = free_ports(2 * size)
        self.members = [
            EtcdMember(f"m{index}", folder / f"m{index}", ports[2 * index], ports[2 * index + 1])
            for index in range(size)
        ]
        self._initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        # A member cut off loses both its ports: the peers' Raft streams, and any call
        # a member makes to another's client port.
        self._partitions = Partitions([member.ports for member in self.members])
        self._clocks = Clocks(folder, size)
        self._power = Power([member.folder for member in self.members])

    def start(self) -> None:
        self._partitions.install()
        self._power.mount()
        for index, member in enumerate(self.members):
            member.start(
                self._initial, self._partitions.group(index), self._clocks.environment(index)
            )
        deadline = time.monotonic() + START_DEADLINE
        for member in self.members:
            member.wait_healthy(deadline)

    def stop(self) -> None:
        try:
            for member in self.members:
                member.kill()
                self._clocks.release(member.process)
        finally:
            try:
                self._partitions.remove()
            finally:
                self._power.unmount()

    # -- the nemesis's controls ---------------------------------------------------------

    def leader(self) -> int | None:
        """The member Raft elected, as the first member that answers says."""
        for member in self.members:
            try:
                answer = request("POST", f"{member.client_url}/v3/maintenance/status", b"{}", 1.0)
            except OSError:
                continue
            if answer.status != 200:
                continue
            status = json.loads(answer.body)
            leader = status.get("leader")
            for index, other in enumerate(self.members):
                if other.member_id(1.0) == leader:
                    return index
            return None
        return None

    def kill(self, index: int) -> None:
        self.members[index].kill()
        self._clocks.release(self.members[index].process)

    def restart(self, index: int) -> None:
        member = self.members[index]
        # On its data: the cluster flags are ignored then.
        member.start(self._initial, self._partitions.group(index), self._clocks.environment(index))

    def pause(self, index: int) -> None:
        send(self.members[index].process, signal.SIGSTOP)

    def resume(self, index: int) -> None:
        send(self.members[index].process, signal.SIGCONT)

    def prepare_partitions(self) -> str | None:
        return self._partitions.prepare()

    def partition(self, index: int) -> None:
        self._partitions.cut(index)

    def heal(self, index: int) -> None:
        self._partitions.heal(index)

    def prepare_clocks(self) -> str | None:
        return self._clocks.prepare()

    def clocks_unreached(self) -> str | None:
        """Why a step would not reach the members (a Go program's clock: it always
        would not, but the fake clock's own check says so, not this adapter)."""
        return self._clocks.unreached([[member.process] for member in self.members])

    def step_clock(self, index: int, seconds: float) -> None:
        """Never asked once `clocks_unreached` said why not; here for the protocol."""
        self._clocks.step(index, seconds)

    def prepare_power(self) -> str | None:
        return self._power.prepare()

    def power_cut(self, index: int) -> Unsynced:
        """The member's process killed, then its folder's unsynced writes dropped."""
        self.kill(index)
        return self._power.cut(index)

    # -- the clients' operations --------------------------------------------------------

    def attempt(
        self, index: int, kind: Kind, key: str, value: bytes | None, timeout: float, name: str
    ) -> Op:
        """One operation through member `index`, recorded in the course API's terms."""
        path, message = _request_of(kind, key, value)
        if kind is Kind.GET and self.serializable:
            message["serializable"] = True
        invoked = time.monotonic()
        try:
            answer = request(
                "POST",
                f"{self.members[index].client_url}{path}",
                body=json.dumps(message).encode(),
                timeout=timeout,
                headers={"Content-Type": "application/json"},
            )
        except OSError:
            return Op(kind, key, value, invoked, None, None, node=name)
        completed = time.monotonic()
        if answer.status != 200:
            return Op(kind, key, value, invoked, completed, 503, node=name)
        if kind is Kind.GET:
            found = json.loads(answer.body).get("kvs") or []
            read = base64.b64decode(found[0].get("value", "")) if found else None
            return Op(kind, key, read, invoked, completed, 404 if read is None else 200, node=name)
        status = 201 if kind is Kind.PUT else 202
        return Op(kind, key, value, invoked, completed, status, node=name)


def _request_of(kind: Kind, key: str, value: bytes | None) -> tuple[str, dict[str, object]]:
    encoded = base64.b64encode(key.encode()).decode()
    if kind is Kind.PUT:
        assert value is not None
        return "/v3/kv/put", {"key": encoded, "value": base64.b64encode(value).decode()}
    if kind is Kind.DELETE:
        return "/v3/kv/deleterange", {"key": encoded}
    return "/v3/kv/range", {"key": encoded}
