"""SPEC.md section 6: dht's command line (`python -m dht`): help, flags, the errors a
node that cannot start reports, and the exit code of a graceful stop."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import HOST, free_port, wait_for
from dht.conformance.launcher import Node
from dht.conformance.rules import rule
from tests.launcher import run_module

pytestmark = pytest.mark.dht

EXIT_WITHIN = 10.0
STOP_WITHIN = 5.0


def run_dht(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("dht", *args, timeout=EXIT_WITHIN)


def assert_one_line_error(result: subprocess.CompletedProcess[str], mentions: str) -> None:
    """A non-zero exit, no traceback, and exactly one line saying what is wrong (besides
    argparse's usage block and any log lines of other levels)."""
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [
        line
        for line in result.stderr.splitlines()
        if "error" in line.lower() and not line.startswith(("usage:", " "))
    ]
    assert len(errors) == 1, result.stderr
    assert mentions in errors[0], errors[0]


@dataclass
class CommandLineNode(Node):
    """A node started from an exact command line rather than the launcher's template."""

    argv: list[str] = field(default_factory=list)

    def command(self) -> list[str]:
        return self.argv


@rule("6.3")
@pytest.mark.parametrize("args", [["--help"], ["node", "--help"], ["cluster", "--help"]])
def test_help_exits_0(args: list[str]) -> None:
    result = run_dht(*args)
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()


@rule("6.3")
@pytest.mark.parametrize(
    ("flag", "default"),
    [("--timeout", "1.0"), ("--breaker-threshold", "5"), ("--breaker-cooldown", "2.0")],
)
def test_node_help_lists_each_fault_handling_flag_with_its_default(flag: str, default: str) -> None:
    text = " ".join(run_dht("node", "--help").stdout.split())
    assert re.search(rf"{flag} [A-Z_]+ [^()]*\(default:? {re.escape(default)}\)", text), text


def node_args(port: int, data_dir: Path, cluster: str) -> list[str]:
    return ["node", "--port", str(port), "--data-dir", str(data_dir), "--cluster", cluster]


BAD_FLAGS = {
    "cluster-not-a-url": (["--cluster", "notaurl"], "notaurl"),
    "cluster-url-with-path": (["--cluster", "http://127.0.0.1:{port}/x"], "/x"),
    "cluster-lists-a-node-twice": (
        ["--cluster", "http://127.0.0.1:{port},http://127.0.0.1:{port}"],
        "twice",
    ),
    "self-not-in-cluster": (["--self", "http://127.0.0.1:1"], "--self"),
    "port-not-a-number": (["--port", "abc"], "--port"),
    "port-out-of-range": (["--port", "70000"], "--port"),
    "timeout-zero": (["--timeout", "0"], "--timeout"),
    "secret-over-1-KiB": (["--secret", "s" * 1025], "--secret"),
    "unknown-flag": (["--bogus"], "--bogus"),
}


@rule("6.4")
@pytest.mark.parametrize(("override", "mentions"), BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_node_with_a_bad_flag_exits_nonzero_with_a_one_line_error(
    tmp_path: Path, override: list[str], mentions: str
) -> None:
    port = free_port()
    args = node_args(port, tmp_path / "data", f"http://127.0.0.1:{port}")
    args += [arg.format(port=port) for arg in override]  # argparse: the last one wins
    assert_one_line_error(run_dht(*args), mentions)


@rule("6.4")
@pytest.mark.parametrize("missing", ["--port", "--data-dir", "--cluster"])
def test_node_without_a_required_flag_exits_nonzero_with_a_one_line_error(
    tmp_path: Path, missing: str
) -> None:
    port = free_port()
    args = node_args(port, tmp_path / "data", f"http://127.0.0.1:{port}")
    position = args.index(missing)
    del args[position : position + 2]
    assert_one_line_error(run_dht(*args), missing)


@rule("6.4")
def test_node_on_a_taken_port_exits_nonzero_with_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        result = run_dht(*node_args(port, tmp_path / "data", f"http://127.0.0.1:{port}"))
    assert_one_line_error(result, str(port))


@rule("6.4")
def test_node_on_a_data_dir_in_use_exits_nonzero_with_a_one_line_error(node: Node) -> None:
    port = free_port()
    result = run_dht(*node_args(port, node.data_dir, f"http://127.0.0.1:{port}"))
    assert_one_line_error(result, str(node.data_dir))
    assert "another node" in result.stderr, result.stderr
    assert node.put("k", b"v").status == 201, "the node owning the data dir still serves"


@rule("6.1", "6.2")
def test_self_defaults_to_the_cluster_entry_with_this_port_and_hosts_may_be_names(
    tmp_path: Path,
) -> None:
    port = free_port()
    data_dir = tmp_path / "node"
    url = f"http://localhost:{port}"
    argv = [sys.executable, "-m", "dht", *node_args(port, data_dir, url)]
    node = CommandLineNode(port, data_dir, url, [url], argv=argv)
    node.start()
    try:
        assert node.put("k", b"v").status == 201
        assert node.get("k").body == b"v"
    finally:
        node.stop()


@rule("6.4")
def test_node_on_a_damaged_data_dir_exits_nonzero_naming_the_folder_and_the_repair(
    tmp_path: Path,
) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    node = Node(port, data_dir, f"http://127.0.0.1:{port}", [f"http://127.0.0.1:{port}"])
    node.start()
    assert node.put("kept", b"v").status == 201
    node.stop()
    (data_dir / "leveldb" / "CURRENT").write_text("MANIFEST-999999\n")

    result = run_dht(*node_args(port, data_dir, f"http://127.0.0.1:{port}"))
    assert_one_line_error(result, str(data_dir / "leveldb"))
    assert "damaged" in result.stderr
    assert f"python -m dht repair --data-dir {data_dir}" in result.stderr

    repaired = run_dht("repair", "--data-dir", str(data_dir))
    assert repaired.returncode == 0, repaired.stderr
    node.start()
    assert node.get("kept").body == b"v"
    node.stop()


@rule("6.5")
def test_sigterm_stops_the_node_with_exit_code_0_within_a_few_seconds(node: Node) -> None:
    code, elapsed = node.stop_timed(signal.SIGTERM, STOP_WITHIN)
    assert code == 0, node.log_tail()
    assert elapsed < STOP_WITHIN


@rule("6.5")
def test_ctrl_c_stops_the_node_with_exit_code_0_within_a_few_seconds(node: Node) -> None:
    code, elapsed = node.stop_timed(signal.SIGINT, STOP_WITHIN)
    assert code == 0, node.log_tail()
    assert elapsed < STOP_WITHIN


@rule("6.5")
def test_sigterm_stops_the_node_within_a_few_seconds_despite_a_stalled_request(
    start_cluster: ClusterFactory,
) -> None:
    node, paused = start_cluster(
        2, ["--max-in-flight", "1", "--timeout", "30", "--breaker-threshold", "100"]
    )
    paused.pause()
    try:
        with (
            socket.create_connection((HOST, node.port), timeout=10.0) as stalled,
            socket.create_connection((HOST, node.port), timeout=10.0) as slow_body,
        ):
            # A 2/2 GET waits up to 30 s for the paused replica; a PUT's body stalls.
            stalled.sendall(b"GET /v0/entity?id=stalled&replicas=2/2 HTTP/1.1\r\nHost: dht\r\n\r\n")
            slow_body.sendall(
                b"PUT /v0/entity?id=slow HTTP/1.1\r\nHost: dht\r\nContent-Length: 10\r\n\r\nx"
            )
            # With one slot, a 503 to another request proves the GET is in flight.
            wait_for(lambda: node.get("other").status, lambda status: status == 503)
            code, elapsed = node.stop_timed(signal.SIGTERM, STOP_WITHIN)
    finally:
        paused.resume()
    assert code == 0, node.log_tail()
    assert elapsed < STOP_WITHIN
