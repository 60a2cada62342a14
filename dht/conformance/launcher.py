"""Starts real node processes for the tests: one launcher for spec and chaos tests.

The node command is a template, so the same spec tests can check another implementation
of the API: set DHT_NODE_COMMAND to a command line with the placeholders {port},
{data_dir}, {cluster} (comma-separated URLs) and {self} (this node's URL in the cluster
list), for example

    DHT_NODE_COMMAND='java -jar my.jar --port {port} --dir {data_dir} --topology {cluster}'

Such a command gets the course's URLs, http://localhost:PORT, in {cluster} and {self}
(DHT_TOPOLOGY_HOST=127.0.0.1 asks for http://127.0.0.1:PORT); dht's own nodes get
127.0.0.1 unless asked (see `topology_host`). Ports are chosen free at run time on
127.0.0.1, where the tests' clients reach every node; every process is stopped at
teardown.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dht.conformance.http_client import (
    HOST,
    Metrics,
    RawResponse,
    Response,
    entities_url,
    entity_url,
    raw_get,
    request,
    status_code,
)
from dht.conformance.peer_tools import (
    cluster_secret,
    decode_frames,
    internal_request,
    records_url,
    replica_call,
)
from dht.model.record import Record
from dht.testbed.certificates import LocalCA
from dht.testbed.namespaces import die_with_parent
from dht.testbed.node_template import COURSE_HOST, NUMERIC_HOST, node_argv, topology_url
from dht.testbed.toxiproxy import free_ports
from dht.transport.messages import (
    Answer,
    GetRecord,
    PutRecord,
    Refused,
)

T = TypeVar("T")

# How long a node may take to answer /v0/status after its start (the conformance kit's
# --start-timeout); rule 1.1's own one second is checked by its test.
READY_DEADLINE = float(os.environ.get("DHT_START_TIMEOUT", "15"))
STOP_DEADLINE = 10.0
# The folder a node command runs in: the kit sets it to where the user started the kit,
# so a relative path in the command means what it meant there.
NODE_CWD_ENV = "DHT_NODE_CWD"
# "1": every Cluster's nodes talk TLS to each other, with certificates from a throwaway CA
# in the cluster's folder (the suite runs over TLS; dht's own flags).
TLS_ENV = "DHT_TLS"
# The host of the nodes' URLs in {cluster} and {self}: localhost or 127.0.0.1 (the
# conformance kit's --topology-host); unset, `topology_host` chooses.
TOPOLOGY_HOST_ENV = "DHT_TOPOLOGY_HOST"
# Set (by the kit's --nodes) to the comma-separated URLs of a cluster the kit did not
# start: the suite grades those nodes instead of starting its own (running_cluster.py).
NODES_ENV = "DHT_NODES"
# The smallest non-empty key: a range from it takes every key (a start must not be empty).
LOWEST_KEY = "\x00"
DEFAULT_COMMAND = (
    f"{shlex.quote(sys.executable)} -m dht node --port {{port}} --data-dir {{data_dir}} "
    "--cluster {cluster} --self {self}"
)


def node_workdir() -> Path:
    """The folder a node command runs in (NODE_CWD_ENV, else this process's)."""
    return Path(os.environ.get(NODE_CWD_ENV) or os.getcwd())


def node_command_template() -> str:
    return os.environ.get("DHT_NODE_COMMAND", DEFAULT_COMMAND)


def testing_dht_itself() -> bool:
    """True unless DHT_NODE_COMMAND points the tests at another implementation, or
    DHT_NODES at nodes someone else started (whatever they run, they take no flags
    from the tests)."""
    return node_command_template() == DEFAULT_COMMAND and not os.environ.get(NODES_ENV)


def topology_host() -> str:
    """The host of every node's URL in the topology: DHT_TOPOLOGY_HOST if set, else the
    course's `localhost` for another implementation, which finds itself in the list by
    that string, and `127.0.0.1` for dht's own nodes, which bind it: a dial of
    `localhost` costs them a lookup, and where /etc/hosts also maps it to ::1, a refused
    attempt at ::1 first, on every replica channel and every new HTTP connection."""
    chosen = os.environ.get(TOPOLOGY_HOST_ENV)
    if chosen:
        return chosen
    return NUMERIC_HOST if testing_dht_itself() else COURSE_HOST


def dht_tuning(*flags: str) -> list[str]:
    """Flags a test passes to dht's nodes only: to make it steadier (a longer --timeout,
    patient breakers) or to bring a limit within its reach (a lower --max-in-flight).
    Another implementation, which has flags of its own, is started without them; a
    rule never depends on them."""
    return list(flags) if testing_dht_itself() else []


class NodeNotReady(RuntimeError):
    """A node started did not answer /v0/status with 200 within the deadline, or exited
    first: the message names it, with its last log line and the tail of its log."""


@dataclass
class Node:
    """One node process. `url` is where clients reach it; `cluster_url` is how it appears
    in the topology (a Toxiproxy address when the node runs behind one)."""

    port: int
    data_dir: Path
    cluster_url: str
    topology: list[str]
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    # What runs the command elsewhere: a network namespace's `nsenter ...` (NetnsTestbed).
    prefix: list[str] = field(default_factory=list)
    # Added to the process's environment: a fake clock's preload (FakeClock.environment).
    env: dict[str, str] = field(default_factory=dict)
    # Where clients reach it: 127.0.0.1 for the nodes the launcher starts.
    host: str = HOST
    # Put before every key the client helpers send: "" for a cluster started for one
    # test; on a cluster that outlives the tests, a prefix of each test's own
    # (running_cluster.py), so that no test reads another's keys.
    namespace: str = ""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def key(self, name: str) -> str:
        """The key a test calls `name`, as sent to this node (see `namespace`)."""
        return self.namespace + name

    def __repr__(self) -> str:
        return f"Node({self.url})"

    def command(self) -> list[str]:
        argv = node_argv(
            node_command_template(), self.port, self.data_dir, self.topology, self.cluster_url
        )
        return [*self.prefix, *argv, *self.extra_args]

    def start(self, wait: bool = True) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.log_path = self.data_dir.with_suffix(".log")
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=node_workdir(),
                env=os.environ | self.env if self.env else None,
                # A node in a namespace would keep it alive past a harness that crashed.
                preexec_fn=die_with_parent() if self.prefix else None,
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, deadline: float = READY_DEADLINE) -> float:
        """Polls /v0/status until 200; returns the seconds it took. Raises NodeNotReady."""
        started = time.monotonic()
        while time.monotonic() - started < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise NodeNotReady(
                    f"node {self.url} exited with code {self.process.returncode} before "
                    f"/v0/status answered 200; {self.last_log_line()}\n{self.log_tail()}"
                )
            if status_code(self.url) == 200:
                return time.monotonic() - started
            time.sleep(0.02)
        raise NodeNotReady(
            f"node {self.url}: /v0/status did not answer 200 within {deadline} s of the "
            f"start; {self.last_log_line()}\n{self.log_tail()}"
        )

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL past the deadline; returns the exit code."""
        return self._signal(signal.SIGTERM)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL)

    def stop_timed(self, signum: signal.Signals, within: float) -> tuple[int | None, float]:
        """Sends `signum` and waits up to `within` seconds for the exit; returns the exit
        code (None if still running) and the seconds it took."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(signum)
        try:
            code: int | None = self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            code = None
        return code, time.monotonic() - started

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP: the process freezes as in a long GC pause; its sockets stay open and
        the kernel keeps accepting connections for it, but nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a paused node runs on from where it stopped."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _signal(self, signum: int) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signum)
            self.process.send_signal(signal.SIGCONT)  # a paused node cannot act on SIGTERM
            try:
                self.process.wait(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def last_log_line(self) -> str:
        """The node's last words (an error, usually), for a one-line failure."""
        lines = [line for line in self.log_tail().splitlines() if line.strip()]
        return f"its last log line: {lines[-1].strip()}" if lines else "it logged nothing"

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # -- client helpers ----------------------------------------------------------------

    def get(self, key: str, replicas: str | None = None) -> Response:
        return request("GET", entity_url(self.url, self.key(key), replicas))

    def put(self, key: str, value: bytes, replicas: str | None = None) -> Response:
        return request("PUT", entity_url(self.url, self.key(key), replicas), body=value)

    def delete(self, key: str, replicas: str | None = None) -> Response:
        return request("DELETE", entity_url(self.url, self.key(key), replicas))

    def range(self, start: str, end: str | None = None) -> Response:
        return request("GET", entities_url(self.url, start, end))

    def range_chunks(self, start: str, end: str | None = None) -> RawResponse:
        """The range with its chunked framing kept (see RawResponse.chunks)."""
        return raw_get(entities_url(self.url, start, end))

    # -- this node's own records (dht's internal API, not v0; for cluster and chaos tests)

    def local_records(self, start: str = LOWEST_KEY, end: str | None = None) -> dict[str, Record]:
        """The records this node itself stores in [start, end), tombstones included, read
        from `GET /internal/v0/records`, which is never coordinated: how many nodes hold a
        key, and which version each one holds. The default start takes every key."""
        response = internal_request(self, "GET", records_url(self.url, start, end))
        if response.status != 200:
            raise RuntimeError(f"{self.url} local records: {response.status} {response.text}")
        return decode_frames(response.body)

    def put_local(self, key: str | bytes, record: Record) -> Answer | Refused:
        """A replica write to this node only, on the replica channel, as a peer sends it:
        Stored, Failed (the node declined), or Refused (the channel was not opened)."""
        key = key.encode() if isinstance(key, str) else key
        return replica_call(self, lambda call_id: PutRecord(call_id, key, record))

    def get_local(self, key: str | bytes) -> Answer | Refused:
        """A replica read of this node only: RecordFound or RecordAbsent."""
        key = key.encode() if isinstance(key, str) else key
        return replica_call(self, lambda call_id: GetRecord(call_id, key))

    def status(self) -> dict[str, Any]:
        """The node's `/v0/status` document; raises RuntimeError on another answer."""
        response = request("GET", self.url + "/v0/status", timeout=5.0)
        if response.status != 200:
            raise RuntimeError(f"{self.url} status: {response.status} {response.text}")
        answer: dict[str, Any] = json.loads(response.body)
        return answer

    def metrics(self) -> Metrics:
        """The node's `GET /metrics`, parsed; raises RuntimeError on another answer."""
        response = request("GET", self.url + "/metrics", timeout=5.0)
        if response.status != 200:
            raise RuntimeError(f"{self.url} metrics: {response.status} {response.text}")
        return Metrics.parse(response.body.decode())

    @property
    def peer_tls(self) -> ssl.SSLContext | None:
        """With TLS between nodes (`--tls-ca`), the context a tool that speaks to this
        node as a peer does (it presents the node's own certificate); else None."""
        ca, cert, key = self.flag("--tls-ca"), self.flag("--tls-cert"), self.flag("--tls-key")
        if ca is None or cert is None or key is None:
            return None
        context = ssl.create_default_context(cafile=ca)
        context.load_cert_chain(cert, key)
        return context

    def flag(self, name: str) -> str | None:
        """The value of `--name` among the node's extra arguments, if given."""
        for index, arg in enumerate(self.extra_args):
            if arg == name and index + 1 < len(self.extra_args):
                return self.extra_args[index + 1]
            if arg.startswith(name + "="):
                return arg.partition("=")[2]
        return None


class Cluster:
    """N nodes with one topology, on free loopback ports: each node's `url` (where the
    tests reach it) is on 127.0.0.1, its `cluster_url` in the `topology_host` form."""

    def __init__(
        self,
        root: Path,
        size: int,
        extra_args: list[str] | None = None,
        ports: list[int] | None = None,
    ) -> None:
        """`ports`: where the nodes listen; by default free ones, chosen now."""
        ports = ports or free_ports(size)
        host = topology_host()
        self.urls = [topology_url(host, port) for port in ports]
        self.nodes = [
            Node(
                port,
                root / f"node-{i}",
                self.urls[i],
                self.urls,
                list(extra_args or []),
            )
            for i, port in enumerate(ports)
        ]
        if os.environ.get(TLS_ENV) == "1" and "--tls-ca" not in (extra_args or []):
            authority = LocalCA(root / "tls")
            # TLS comes with a cluster secret (SPEC.md rule 11.7), as `cluster --tls` gives.
            secret = [] if cluster_secret(self.nodes[0]) else ["--secret", secrets.token_hex(16)]
            for i, node in enumerate(self.nodes):
                node.extra_args += [*secret, *authority.issue(f"node-{i}").flags()]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __getitem__(self, index: int) -> Node:
        return self.nodes[index]

    def __len__(self) -> int:
        return len(self.nodes)

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start(wait=False)
        for node in self.nodes:
            node.wait_ready()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            if node.running:
                assert node.process is not None
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            node.stop()
