"""`python -m dht cluster --netns`: dht's nodes, each in a network namespace of its own
and told nothing of Toxiproxy, replicate through the links, which the cluster's one
Toxiproxy API cuts; Ctrl-C leaves nothing behind. `--node-command --chaos` runs another
implementation's nodes (the naive node) the same way. Where the mode cannot run, the
command says why in one line."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.pinned_namespaces import PinnedNamespaces
from dht.conformance.http_client import request, wait_for
from dht.testbed.netns import netns_unavailable
from dht.testbed.toxiproxy import consecutive_free_ports
from tests.launcher import REPO, interrupt

unavailable = netns_unavailable()


def children_of(root: int) -> list[int]:
    """Every process descended from `root`, by the parent each names in /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent:
                found.append(pid)
                frontier.append(pid)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def uplinks(holders: list[int]) -> set[str]:
    """The root namespace's veths to the bridge of a test bed whose hub namespace one of
    `holders` held (netns.py names them dhtPID): other test beds', started by other test
    workers meanwhile, are theirs."""
    return set(os.listdir("/sys/class/net")) & {f"dht{pid}" for pid in holders}


@pytest.mark.skipif(unavailable is not None, reason=unavailable or "")
def test_netns_cluster_replicates_through_links_a_cut_fails_and_ctrl_c_leaves_nothing(
    tmp_path: Path,
) -> None:
    ports = consecutive_free_ports(3)
    command = [sys.executable, "-m", "dht", "cluster", "--netns", "--nodes", "3"]
    command += ["--base-port", str(ports[0]), "--data-dir", str(tmp_path / "data")]
    command += ["--dashboard-port", "0"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    namespaces = PinnedNamespaces(())
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        control = tmp_path / "data" / "cluster.json"
        wait_for(control.exists, bool, deadline=20.0)  # written once every node serves
        api = json.loads(control.read_text())["toxiproxy"]
        started = children_of(process.pid)
        namespaces = PinnedNamespaces(started)
        assert len(namespaces.names) == 4  # the nodes' and the hub's
        assert request("PUT", f"{urls[0]}/v0/entity?id=k&replicas=3/3", b"v").status == 201
        assert request("GET", f"{urls[1]}/v0/entity?id=k&replicas=3/3").body == b"v"
        for link in ("node3-to-node1", "node3-to-node2", "node1-to-node3", "node2-to-node3"):
            cut = request("POST", f"{api}/proxies/{link}", json.dumps({"enabled": False}).encode())
            assert cut.status == 200, cut.body
        assert request("PUT", f"{urls[0]}/v0/entity?id=k2&replicas=3/3", b"v").status == 504
        assert request("PUT", f"{urls[0]}/v0/entity?id=k3&replicas=2/3", b"v").status == 201
        assert request("POST", f"{api}/reset", b"").status == 204
        written = wait_for(
            lambda: request("PUT", f"{urls[2]}/v0/entity?id=k4&replicas=3/3", b"v").status,
            lambda status: status == 201,
        )
        assert written == 201
    finally:
        output = interrupt(process)
    with namespaces:
        assert process.returncode == 0, output.decode(errors="replace")
        assert [pid for pid in started if alive(pid)] == []
        assert namespaces.occupants() == []
    assert uplinks(started) == set()


@pytest.mark.skipif(unavailable is not None, reason=unavailable or "")
def test_node_command_with_chaos_runs_another_implementation_in_namespaces_behind_links(
    tmp_path: Path,
) -> None:
    """`--node-command --chaos` is the namespace mode: the naive node (tests/naive/node.py)
    cannot be told of the links, and still crosses them."""
    ports = consecutive_free_ports(3)
    naive = REPO / "tests" / "naive" / "node.py"
    template = (
        f"{shlex.quote(sys.executable)} {shlex.quote(str(naive))} --port {{port}} "
        "--data-dir {data_dir} --cluster {cluster} --self {self}"
    )
    command = [sys.executable, "-m", "dht", "cluster", "--chaos", "--nodes", "3"]
    command += ["--base-port", str(ports[0]), "--data-dir", str(tmp_path / "data")]
    command += ["--dashboard-port", "0", "--node-command", template]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    started: list[int] = []
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        control = tmp_path / "data" / "cluster.json"
        wait_for(control.exists, bool, deadline=20.0)  # written once every node serves
        api = json.loads(control.read_text())["toxiproxy"]
        started = children_of(process.pid)
        own = os.readlink("/proc/self/ns/net")
        assert len({os.readlink(f"/proc/{pid}/ns/net") for pid in started} - {own}) == 4
        links = json.loads(request("GET", f"{api}/proxies").body)
        assert set(links) == {
            f"node{source}-to-node{target}"
            for source in (1, 2, 3)
            for target in (1, 2, 3)
            if source != target
        }
        assert request("PUT", f"{urls[0]}/v0/entity?id=k&replicas=3/3", b"v").status == 201
        for link in ("node3-to-node1", "node3-to-node2", "node1-to-node3", "node2-to-node3"):
            cut = request("POST", f"{api}/proxies/{link}", json.dumps({"enabled": False}).encode())
            assert cut.status == 200, cut.body
        assert request("PUT", f"{urls[1]}/v0/entity?id=k2&replicas=3/3", b"v").status == 504
        assert request("PUT", f"{urls[1]}/v0/entity?id=k3&replicas=2/3", b"v").status == 201
        assert request("GET", f"{urls[2]}/v0/entity?id=k&replicas=1/3").status == 200
    finally:
        output = interrupt(process)
    text = output.decode(errors="replace")
    assert process.returncode == 0, text
    assert f"each node runs: {template}" in text
    assert [pid for pid in started if alive(pid)] == []


def test_node_command_with_chaos_where_namespaces_cannot_run_is_one_line_and_exit_code_2(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "dht", "cluster", "--chaos", "--data-dir", str(tmp_path)]
    command += ["--node-command", "my-node --port {port}"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=os.environ | {"DHT_TOXIPROXY_SERVER": str(tmp_path / "no-such-toxiproxy")},
        timeout=20,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: --chaos with --node-command (each node in a network "), lines


def test_netns_where_it_cannot_run_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dht", "cluster", "--netns", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=os.environ | {"DHT_TOXIPROXY_SERVER": str(tmp_path / "no-such-toxiproxy")},
        timeout=20,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --netns cannot run here: "), lines


def test_netns_with_a_host_other_than_loopback_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dht", "cluster", "--netns", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--host is 0.0.0.0" in done.stderr
