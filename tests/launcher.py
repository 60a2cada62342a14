"""Starts real node processes for the tests: one launcher for spec and chaos tests.

The node command is a template, so the same spec tests can check another implementation
of the API: set DHT_NODE_COMMAND to a command line with the placeholders {port},
{data_dir}, {cluster} (comma-separated URLs) and {self} (this node's URL in the cluster
list), for example

    DHT_NODE_COMMAND='java -jar my.jar --port {port} --dir {data_dir} --topology {cluster}'

Ports are chosen free at run time on 127.0.0.1; every process is stopped at teardown.
"""

from __future__ import annotations

import http.client
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
READY_DEADLINE = 15.0
STOP_DEADLINE = 10.0
DEFAULT_COMMAND = (
    f"{shlex.quote(sys.executable)} -m dht node --port {{port}} --data-dir {{data_dir}} "
    "--cluster {cluster} --self {self}"
)


def node_command_template() -> str:
    return os.environ.get("DHT_NODE_COMMAND", DEFAULT_COMMAND)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str]

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def request(method: str, url: str, body: bytes | None = None, timeout: float = 10.0) -> Response:
    """One HTTP request on a fresh connection; raises OSError if nothing answers."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=body)
        response = connection.getresponse()
        return Response(response.status, response.read(), dict(response.getheaders()))
    finally:
        connection.close()


def entity_url(base: str, key: str, replicas: str | None = None) -> str:
    query = {"id": key}
    if replicas is not None:
        query["replicas"] = replicas
    return f"{base}/v0/entity?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


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

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        line = node_command_template().format(
            port=self.port,
            data_dir=shlex.quote(str(self.data_dir)),
            cluster=",".join(self.topology),
            self=self.cluster_url,
        )
        return [*shlex.split(line), *self.extra_args]

    def start(self, wait: bool = True) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.log_path = self.data_dir.with_suffix(".log")
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, deadline: float = READY_DEADLINE) -> float:
        """Polls /v0/status until 200; returns the seconds it took."""
        started = time.monotonic()
        while time.monotonic() - started < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"node {self.url} exited: {self.log_tail()}")
            try:
                if request("GET", self.url + "/v0/status", timeout=1.0).status == 200:
                    return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"node {self.url} not ready in {deadline}s: {self.log_tail()}")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL past the deadline; returns the exit code."""
        return self._signal(signal.SIGTERM)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _signal(self, signum: int) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signum)
            try:
                self.process.wait(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # -- client helpers ----------------------------------------------------------------

    def get(self, key: str, replicas: str | None = None) -> Response:
        return request("GET", entity_url(self.url, key, replicas))

    def put(self, key: str, value: bytes, replicas: str | None = None) -> Response:
        return request("PUT", entity_url(self.url, key, replicas), body=value)

    def delete(self, key: str, replicas: str | None = None) -> Response:
        return request("DELETE", entity_url(self.url, key, replicas))

    def range(self, start: str, end: str | None = None) -> Response:
        query = {"start": start} | ({} if end is None else {"end": end})
        encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return request("GET", f"{self.url}/v0/entities?{encoded}")


class Cluster:
    """N nodes with one topology, on free loopback ports."""

    def __init__(
        self,
        root: Path,
        size: int,
        extra_args: list[str] | None = None,
    ) -> None:
        ports = [free_port() for _ in range(size)]
        self.urls = [f"http://{HOST}:{port}" for port in ports]
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
