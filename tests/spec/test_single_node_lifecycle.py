"""SPEC.md sections 1 and 5 on one node: start, graceful stop, crash, persistence."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures import ClusterFactory
from tests.launcher import HOST, Cluster, Node, request, wait_for

READY_WITHIN = 1.0  # SPEC.md section 1: status answers within 1 s of process start
STOP_WITHIN = 5.0  # "within a few seconds"


@pytest.fixture
def unstarted_node(tmp_path: Path) -> Iterator[Node]:
    """A single-node cluster's node whose process is not started yet."""
    node = Cluster(tmp_path / "unstarted", 1)[0]
    yield node
    node.stop()


def status_of(node: Node) -> int:
    return request("GET", node.url + "/v0/status", timeout=2.0).status


def stop_timed(node: Node, signum: signal.Signals) -> tuple[int | None, float]:
    """Sends `signum` and waits for the exit; returns the exit code and seconds taken."""
    assert node.process is not None
    started = time.monotonic()
    node.process.send_signal(signum)
    try:
        code = node.process.wait(timeout=STOP_WITHIN)
    except subprocess.TimeoutExpired:
        code = None
    return code, time.monotonic() - started


def test_status_answers_200_within_one_second_of_process_start(unstarted_node: Node) -> None:
    started = time.monotonic()
    unstarted_node.start(wait=False)
    unstarted_node.wait_ready()
    elapsed = time.monotonic() - started
    assert elapsed < READY_WITHIN, f"first 200 after {elapsed:.3f}s"


def test_nothing_answers_before_start(unstarted_node: Node) -> None:
    with pytest.raises(ConnectionRefusedError):
        status_of(unstarted_node)


def test_sigterm_stops_the_node_with_exit_code_0_within_a_few_seconds(node: Node) -> None:
    code, elapsed = stop_timed(node, signal.SIGTERM)
    assert code == 0, node.log_tail()
    assert elapsed < STOP_WITHIN


def test_ctrl_c_stops_the_node_with_exit_code_0_within_a_few_seconds(node: Node) -> None:
    code, elapsed = stop_timed(node, signal.SIGINT)
    assert code == 0, node.log_tail()
    assert elapsed < STOP_WITHIN


def test_sigterm_stops_the_node_within_a_few_seconds_despite_a_stalled_request(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--max-in-flight", "1"])[0]
    with socket.create_connection((HOST, node.port), timeout=10.0) as stalled:
        stalled.sendall(
            b"PUT /v0/entity?id=stalled HTTP/1.1\r\nHost: dht\r\nContent-Length: 10\r\n\r\nx"
        )
        # With one slot, a 503 to another request proves the stalled one is in flight.
        wait_for(lambda: node.get("other").status, lambda status: status == 503)
        code, elapsed = stop_timed(node, signal.SIGTERM)
    assert code == 0, node.log_tail()
    assert elapsed < STOP_WITHIN


def test_nothing_answers_after_stop(node: Node) -> None:
    assert node.stop() == 0
    with pytest.raises(ConnectionRefusedError):
        status_of(node)


def test_acknowledged_writes_survive_a_graceful_restart(node: Node) -> None:
    assert node.put("kept", b"value").status == 201
    assert node.put("overwritten", b"old").status == 201
    assert node.put("overwritten", b"new").status == 201
    assert node.put("deleted", b"gone").status == 201
    assert node.delete("deleted").status == 202
    node.restart()
    assert node.get("kept").body == b"value"
    assert node.get("overwritten").body == b"new"
    assert node.get("deleted").status == 404


def test_every_acknowledged_write_survives_kill_9(node: Node) -> None:
    keys = [f"key-{i:03d}" for i in range(200)]
    deleted = set(keys[::10])
    for key in keys:
        assert node.put(key, key.encode()).status == 201
    for key in sorted(deleted):
        assert node.delete(key).status == 202
    assert node.put(keys[-1], b"last").status == 201
    node.kill()  # at once after the last acknowledgement
    node.start()
    for key in keys:
        response = node.get(key)
        if key in deleted:
            assert response.status == 404, key
        else:
            expected = b"last" if key == keys[-1] else key.encode()
            assert (response.status, response.body) == (200, expected), key
