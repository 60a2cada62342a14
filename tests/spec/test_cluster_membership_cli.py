"""`python -m dht cluster add` and `python -m dht cluster remove URL` (SPEC.md rule 6.6,
the `cluster` command, and 13.1, which names the commands that drive a change): a running
local cluster grows by a node and loses one, through the membership change of
dht/membership/driver.py, and keeps every key. Real processes throughout: the `cluster`
command on free ports, and the add and remove commands beside it, as a user runs them
from a second terminal."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dht.conformance.http_client import HOST, free_port, request
from dht.conformance.rules import rule
from dht.testbed.toxiproxy import consecutive_free_ports
from tests.launcher import REPO, run_module

pytestmark = pytest.mark.dht

START_DEADLINE = 30.0
STOP_DEADLINE = 30.0
ACTION_TIMEOUT = 120.0
KEYS = {f"key-{i}": f"value-{i}".encode() for i in range(50)}


@dataclass
class RunningCluster:
    process: subprocess.Popen[bytes]
    data_dir: Path
    urls: list[str]
    log_path: Path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def running_cluster(folder: Path, nodes: int = 3) -> Iterator[RunningCluster]:
    """`python -m dht cluster` on free ports, up; stopped with Ctrl-C (SIGINT) at the end,
    and killed with every node it started if it does not stop."""
    folder.mkdir(parents=True, exist_ok=True)
    ports = consecutive_free_ports(nodes)
    data_dir = folder / "data"
    command = [sys.executable, "-m", "dht", "cluster", "--nodes", str(nodes)]
    command += ["--base-port", str(ports[0]), "--data-dir", str(data_dir)]
    command += ["--dashboard-port", "0"]
    log_path = folder / "cluster.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
        )
    cluster = RunningCluster(
        process, data_dir, [f"http://{HOST}:{port}" for port in ports], log_path
    )
    try:
        deadline = time.monotonic() + START_DEADLINE
        while "Ctrl-C stops every node." not in cluster.output():
            assert process.poll() is None, f"cluster exited:\n{cluster.output()}"
            assert time.monotonic() < deadline, f"cluster not up:\n{cluster.output()}"
            time.sleep(0.1)
        yield cluster
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the command and every node it started
            process.wait()
            raise


def run_dht(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("dht", *args, timeout=ACTION_TIMEOUT)


def json_of(url: str) -> Any:
    answer = request("GET", url)
    assert answer.status == 200, answer
    return json.loads(answer.body)


def assert_every_key_reads_through(url: str) -> None:
    missing = {}
    for key, value in KEYS.items():
        answer = request("GET", f"{url}/v0/entity?id={key}")
        if answer.status != 200 or answer.body != value:
            missing[key] = answer
    assert not missing, f"{len(missing)} of {len(KEYS)} keys not read through {url}: {missing}"


@rule("6.6", "13.1")
def test_cluster_add_then_remove_keeps_every_key(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        first, second = cluster.urls[0], cluster.urls[1]
        for key, value in KEYS.items():
            answer = request("PUT", f"{first}/v0/entity?id={key}", value)
            assert answer.status == 201, (key, answer)

        added = run_dht("cluster", "add", "--data-dir", str(cluster.data_dir))
        said = f"stdout:\n{added.stdout}\nstderr:\n{added.stderr}\ncluster:\n{cluster.output()}"
        assert added.returncode == 0, said
        match = re.search(r"started node (http://\S+)", added.stdout)
        assert match, said
        new = match.group(1)
        assert new not in cluster.urls, said
        assert "step stable" in added.stdout, said

        status = json_of(new + "/v0/status")
        membership = status["membership"]
        assert membership["phase"] == "stable", membership
        assert sorted(membership["current"]) == sorted([*cluster.urls, new]), membership
        assert len(membership["current"]) == 4, membership
        assert json.loads((cluster.data_dir / "cluster.json").read_text())["nodes"] == [
            *cluster.urls,
            new,
        ]
        assert_every_key_reads_through(new)

        removed = run_dht("cluster", "remove", first, "--data-dir", str(cluster.data_dir))
        said = f"stdout:\n{removed.stdout}\nstderr:\n{removed.stderr}\ncluster:\n{cluster.output()}"
        assert removed.returncode == 0, said
        with pytest.raises(ConnectionRefusedError):
            request("GET", first + "/v0/status", timeout=2.0)
        time.sleep(1.5)  # a few rounds of the command's watch over its nodes
        assert cluster.process.poll() is None, f"the removal stopped the cluster:\n{said}"
        membership = json_of(second + "/v0/status")["membership"]
        assert membership["phase"] == "stable", membership
        assert sorted(membership["current"]) == sorted([*cluster.urls[1:], new]), membership
        assert_every_key_reads_through(second)
    assert cluster.process.returncode == 0, cluster.output()


@rule("6.8", "13.8")
def test_cluster_remove_of_a_killed_node_removes_it_as_dead(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 4) as cluster:
        first, second = cluster.urls[0], cluster.urls[1]
        for key, value in KEYS.items():
            answer = request("PUT", f"{first}/v0/entity?id={key}&replicas=2/3", value)
            assert answer.status == 201, (key, answer)
        killed = run_dht("cluster", "kill", first, "--data-dir", str(cluster.data_dir))
        assert killed.returncode == 0, killed
        removed = run_dht("cluster", "remove", first, "--data-dir", str(cluster.data_dir))
        said = f"stdout:\n{removed.stdout}\nstderr:\n{removed.stderr}\ncluster:\n{cluster.output()}"
        assert removed.returncode == 0, said
        assert f"{first} is down: removing it as dead" in removed.stdout, said
        assert "writes at 1/1: " in removed.stdout, said
        membership = json_of(second + "/v0/status")["membership"]
        assert membership["phase"] == "stable", membership
        assert sorted(membership["current"]) == sorted(cluster.urls[1:]), membership
        for url in cluster.urls[1:]:
            assert_every_key_reads_through(url)
    assert cluster.process.returncode == 0, cluster.output()


@rule("6.6", "13.1")
@pytest.mark.parametrize("leftover", ["no-cluster-json", "control-port-refuses"])
def test_cluster_add_without_a_running_cluster_exits_1_with_one_line(
    tmp_path: Path, leftover: str
) -> None:
    data_dir = tmp_path / "data"
    if leftover == "control-port-refuses":  # a cluster.json nothing serves any more
        data_dir.mkdir()
        stale = {"pid": os.getpid(), "host": HOST, "nodes": [], "control_port": free_port()}
        (data_dir / "cluster.json").write_text(json.dumps(stale | {"token": "x"}))
    result = run_dht("cluster", "add", "--data-dir", str(data_dir))
    assert result.returncode == 1, result
    assert result.stdout == "", result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: no cluster is running"), lines[0]
