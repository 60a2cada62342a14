"""`python -m dht cluster --node-command TEMPLATE` (SPEC.md rules 6.6 and 6.8 for nodes
that are not dht's): the test bed runs another implementation of the v0 API, here the
repository's naive node (tests/naive/node.py), from the conformance kit's template.
Real processes throughout: the `cluster` command on free ports, `cluster restart` and
`cluster add` beside it, as a user runs them from a second terminal."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dht.conformance.http_client import request, status_code, wait_for
from dht.conformance.rules import rule
from dht.testbed.toxiproxy import consecutive_free_ports
from tests.launcher import REPO, interrupt, run_module
from tests.spec.test_dht_cluster_command import child_pid

pytestmark = pytest.mark.dht

# Relative to the repository, where the command runs: a node command runs in the folder
# `cluster` was started in.
NAIVE_COMMAND = (
    f"{shlex.quote(sys.executable)} tests/naive/node.py --port {{port}} "
    "--data-dir {data_dir} --cluster {cluster} --self {self}"
)
UP_LINE = "Ctrl-C stops every node."


@rule("6.6", "6.8")
def test_node_command_cluster_serves_survives_a_kill_and_restarts_the_node_on_its_data(
    tmp_path: Path,
) -> None:
    ports = consecutive_free_ports(3)
    data = tmp_path / "data"
    log_path = tmp_path / "cluster.log"
    command = [sys.executable, "-m", "dht", "cluster", "--nodes", "3", "--dashboard-port", "0"]
    command += ["--base-port", str(ports[0]), "--data-dir", str(data)]
    command += ["--node-command", NAIVE_COMMAND]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    # The course's form (node_template.py): the nodes find themselves in it by that string.
    urls = [f"http://localhost:{port}" for port in ports]

    def output() -> str:
        return log_path.read_text(errors="replace")

    try:
        wait_for(lambda: UP_LINE in output() or process.poll() is not None, bool, deadline=30.0)
        assert process.poll() is None, output()
        assert f"each node runs: {NAIVE_COMMAND}" in output()
        for url in urls:
            assert f"naive-node: serving {url} on 127.0.0.1:" in output(), output()
        for index in (1, 2, 3):
            assert (data / f"node-{index}").is_dir()
        # Through each node, read back through every node (3/3: every replica has it).
        for index, url in enumerate(urls):
            put = request("PUT", f"{url}/v0/entity?id=before-{index}&replicas=3/3", b"%d" % index)
            assert put.status == 201, put
        for url in urls:
            for index in range(len(urls)):
                assert request("GET", f"{url}/v0/entity?id=before-{index}").body == b"%d" % index

        refused = run_module("dht", "cluster", "add", "--data-dir", str(data), timeout=30)
        assert refused.returncode == 1 and refused.stdout == "", refused
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert "a --node-command cluster cannot add or remove nodes" in refused.stderr

        os.kill(child_pid(process.pid, ports[2]), signal.SIGKILL)
        killed = f"node {urls[2]} exited with code -9 (SIGKILL); the other nodes serve on"
        wait_for(lambda: killed in output(), bool, deadline=10.0)
        assert status_code(urls[2]) is None
        assert process.poll() is None, "the cluster stopped when one node died"
        assert request("PUT", f"{urls[0]}/v0/entity?id=during", b"2").status == 201
        assert request("GET", f"{urls[1]}/v0/entity?id=during").body == b"2"

        restart = run_module(
            "dht", "cluster", "restart", urls[2], "--data-dir", str(data), timeout=60
        )
        assert restart.returncode == 0, restart.stdout + restart.stderr
        assert f"{urls[2]} serves again" in restart.stdout
        # 3/3 needs its answer: it is back with what it stored before the kill.
        for index in range(len(urls)):
            answer = request("GET", f"{urls[2]}/v0/entity?id=before-{index}&replicas=3/3")
            assert answer.status == 200 and answer.body == b"%d" % index, answer
        assert not (data / "node-4").exists()
    finally:
        interrupt(process)
    assert process.returncode == 0, output()


@rule("6.6")
@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("python tests/naive/node.py --cluster {cluster}", "must contain {port}"),
        ("python tests/naive/node.py --port {port} --host {host}", "bad placeholder 'host'"),
    ],
    ids=["no-port", "unknown-placeholder"],
)
def test_a_bad_node_command_template_is_one_line_and_exit_code_2(
    tmp_path: Path, template: str, reason: str
) -> None:
    done = run_module(
        "dht", "cluster", "--node-command", template, "--data-dir", str(tmp_path), timeout=30
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --node-command"), lines
    assert reason in lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing started


@rule("6.6")
def test_node_command_cluster_gives_the_numeric_form_with_host_127_0_0_1(tmp_path: Path) -> None:
    """--host 127.0.0.1 asks for http://127.0.0.1:PORT in {cluster} and {self}: a node that
    finds itself only by the course's http://localhost:PORT refuses to start, and the
    cluster says so."""
    (port,) = consecutive_free_ports(1)
    course_node = (
        f"{shlex.quote(sys.executable)} tests/conformance/simple_node.py --port {{port}} "
        "--cluster {cluster} --self {self} --course-topology"
    )
    done = run_module(
        "dht", "cluster", "--nodes", "1", "--base-port", str(port), "--host", "127.0.0.1",
        "--dashboard-port", "0", "--data-dir", str(tmp_path / "data"),
        "--node-command", course_node, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    refusal = f"simple-node: http://localhost:{port} is not in --cluster http://127.0.0.1:{port}"
    assert refusal in done.stderr, done.stderr
    assert f"node http://127.0.0.1:{port} exited with code 1" in done.stderr, done.stderr
