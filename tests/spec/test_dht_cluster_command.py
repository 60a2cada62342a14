"""`python -m dht cluster` (SPEC.md rule 6.6): one command starts a local cluster that
serves, and is closed to forged replica writes out of the box (rule 11.4)."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dht.conformance.http_client import HOST, request, status_code, wait_for
from dht.conformance.launcher import Node
from dht.conformance.peer_tools import peer_hello, replica_call
from dht.conformance.rules import rule
from dht.model.clock import version_at, wall_clock_ms
from dht.model.record import Record
from dht.testbed.toxiproxy import consecutive_free_ports
from dht.transport.messages import PutRecord, Refused
from tests.launcher import interrupt

pytestmark = pytest.mark.dht


@rule("6.6", "11.4")
def test_cluster_command_serves_and_refuses_replica_writes_without_its_generated_secret(
    tmp_path: Path,
) -> None:
    ports = consecutive_free_ports(3)
    command = [sys.executable, "-m", "dht", "cluster", "--nodes", "3"]
    command += ["--base-port", str(ports[0]), "--data-dir", str(tmp_path / "data")]
    command += ["--dashboard-port", "0"]  # tests/cockpit covers it, on ports of its own
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # Started as `python -m dht cluster &` starts it: a shell that is not interactive
        # ignores SIGINT in background jobs. Ctrl-C (SIGINT) must still stop it.
        preexec_fn=ignore_sigint,
        start_new_session=True,
    )
    try:
        urls = [f"http://{HOST}:{port}" for port in ports]
        nodes = [
            Node(port, tmp_path / f"n{port}", url, urls)
            for port, url in zip(ports, urls, strict=True)
        ]
        for node in nodes:  # every node, not just one: they start side by side
            wait_for(
                lambda node=node: status_code(node.url), lambda status: status == 200, deadline=20.0
            )
        assert request("PUT", f"{urls[0]}/v0/entity?id=k", b"v").status == 201
        assert request("GET", f"{urls[1]}/v0/entity?id=k").body == b"v"

        forged = Record.live(version_at(wall_clock_ms()), b"forged")
        answer = replica_call(
            nodes[1],
            lambda call_id: PutRecord(call_id, b"k", forged),
            peer_hello(nodes[1]),
            secret="",
        )
        assert isinstance(answer, Refused), answer
        assert "secret" in answer.reason
        assert request("GET", f"{urls[1]}/internal/v0/records?start=a").status == 403
        assert request("GET", f"{urls[2]}/v0/entity?id=k&replicas=3/3").body == b"v"
    finally:
        output = interrupt(process)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    assert "no --secret" not in text  # the nodes got the generated one


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def child_pid(parent: int, port: int) -> int:
    """The pid of the node process `parent` started on `port`."""
    listing = subprocess.run(
        ["ps", "--ppid", str(parent), "-o", "pid=,args="], capture_output=True, text=True
    ).stdout
    for line in listing.splitlines():
        pid, _, args = line.strip().partition(" ")
        if f"--port {port} " in f"{args} ":
            return int(pid)
    raise AssertionError(f"no node on port {port} among the children of {parent}:\n{listing}")


@rule("6.8")
def test_a_node_killed_under_cluster_leaves_the_others_serving_and_restarts_on_its_data(
    tmp_path: Path,
) -> None:
    ports = consecutive_free_ports(3)
    data = tmp_path / "data"
    command = [sys.executable, "-m", "dht", "cluster", "--nodes", "3", "--dashboard-port", "0"]
    command += ["--base-port", str(ports[0]), "--data-dir", str(data)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    urls = [f"http://{HOST}:{port}" for port in ports]
    started: list[bytes] = []
    try:
        assert process.stdout is not None
        # Up once it says so: a node killed while the command still waits for the
        # nodes to start is a failed start, not a node that died.
        for line in process.stdout:
            started.append(line)
            if b"Ctrl-C stops every node." in line:
                break
        assert process.poll() is None, b"".join(started).decode(errors="replace")
        assert request("PUT", f"{urls[0]}/v0/entity?id=before", b"1").status == 201
        os.kill(child_pid(process.pid, ports[2]), signal.SIGKILL)
        wait_for(lambda: status_code(urls[2]), lambda status: status is None, deadline=5.0)
        time.sleep(1.0)  # the cluster's watch loop has seen the exit
        assert process.poll() is None, "the cluster stopped when one node died"
        assert request("PUT", f"{urls[0]}/v0/entity?id=during", b"2").status == 201
        assert request("GET", f"{urls[1]}/v0/entity?id=during").body == b"2"

        restart = subprocess.run(
            [sys.executable, "-m", "dht", "cluster", "restart", urls[2], "--data-dir", str(data)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert restart.returncode == 0, restart.stdout + restart.stderr
        assert f"{urls[2]} serves again" in restart.stdout
        # 3/3 needs it: it answers again, and the write it missed reaches it.
        for key, value in (("before", b"1"), ("during", b"2")):
            answer = request("GET", f"{urls[2]}/v0/entity?id={key}&replicas=3/3")
            assert answer.status == 200 and answer.body == value, answer
        assert (data / "node-3").is_dir() and not (data / "node-4").exists()
    finally:
        output = interrupt(process)
    text = (b"".join(started) + output).decode(errors="replace")
    assert process.returncode == 0, text
    assert f"node {urls[2]} exited with code -9 (SIGKILL); the other nodes serve on" in text, text


@rule("6.6", "11.7")
def test_cluster_tls_makes_a_ca_and_the_nodes_replicate_over_tls(tmp_path: Path) -> None:
    ports = consecutive_free_ports(3)
    data = tmp_path / "data"
    command = [sys.executable, "-m", "dht", "cluster", "--nodes", "3", "--tls"]
    command += ["--base-port", str(ports[0]), "--data-dir", str(data), "--dashboard-port", "0"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    urls = [f"http://{HOST}:{port}" for port in ports]
    try:
        for url in urls:
            wait_for(lambda url=url: status_code(url), lambda status: status == 200, deadline=20.0)
        assert request("PUT", f"{urls[0]}/v0/entity?id=k&replicas=3/3", b"v").status == 201
        assert request("GET", f"{urls[2]}/v0/entity?id=k&replicas=3/3").body == b"v"
        for url in urls:
            status = json.loads(request("GET", f"{url}/v0/status").body)
            assert status["tls"]["enabled"] is True, status["tls"]
        ca = data / "tls" / "ca.pem"
        client = ssl.create_default_context(cafile=str(ca))  # clients may use https too
        https = request("GET", f"https://{HOST}:{ports[1]}/v0/entity?id=k", tls=client)
        assert (https.status, https.body) == (200, b"v")
        # A plain replica channel, even with the secret, is refused.
        node = Node(ports[1], data / "node-2", urls[1], urls)
        answer = replica_call(
            node, lambda call_id: PutRecord(call_id, b"k", Record.live(1, b"x")), secret=""
        )
        assert isinstance(answer, Refused) and "TLS" in answer.reason, answer
    finally:
        output = interrupt(process)
    assert process.returncode == 0, output.decode(errors="replace")
