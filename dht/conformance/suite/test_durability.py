"""SPEC.md section 4, tier `durability`: acknowledged writes survive kill -9 and a
restart; SIGTERM stops a node within 5 seconds, a stalled request or not."""

from __future__ import annotations

import signal
import socket

import pytest

from dht.conformance.http_client import expect, request
from dht.conformance.launcher import Node
from dht.conformance.rules import rule

pytestmark = pytest.mark.durability

STOP_WITHIN = 5.0  # rule 4.2
# Among replicas, a node that lost its writes is answered for by the others.
ALONE = "the other replicas would answer for the writes it lost"


def status_of(node: Node) -> int:
    return request("GET", node.url + "/v0/status", timeout=2.0).status


@rule("4.2")
@pytest.mark.controls("stop")
def test_sigterm_stops_the_node_within_5_seconds(node: Node) -> None:
    code, elapsed = node.stop_timed(signal.SIGTERM, STOP_WITHIN)
    assert code is not None, f"expected an exit within {STOP_WITHIN} s of SIGTERM, got none"
    assert elapsed < STOP_WITHIN


@rule("4.2")
@pytest.mark.controls("stop")
def test_sigterm_stops_the_node_within_5_seconds_despite_a_stalled_request(node: Node) -> None:
    with socket.create_connection((node.host, node.port), timeout=10.0) as stalled:
        stalled.sendall(
            b"PUT /v0/entity?id=stalled HTTP/1.1\r\nHost: dht\r\nContent-Length: 10\r\n\r\nx"
        )
        expect(request("GET", node.url + "/v0/status"), 200, context="beside the stalled PUT")
        code, elapsed = node.stop_timed(signal.SIGTERM, STOP_WITHIN)
    assert code is not None, f"expected an exit within {STOP_WITHIN} s of SIGTERM, got none"
    assert elapsed < STOP_WITHIN


@rule("4.2")
@pytest.mark.controls("stop")
def test_nothing_answers_after_stop(node: Node) -> None:
    node.stop()
    with pytest.raises(ConnectionRefusedError):
        status_of(node)


@rule("4.2")
@pytest.mark.controls("stop", "start")
@pytest.mark.lone_node(ALONE)
def test_acknowledged_writes_survive_a_graceful_restart(node: Node) -> None:
    expect(node.put("kept", b"value"), 201)
    expect(node.put("overwritten", b"old"), 201)
    expect(node.put("overwritten", b"new"), 201)
    expect(node.put("deleted", b"gone"), 201)
    expect(node.delete("deleted"), 202)
    node.restart()
    expect(node.get("kept"), 200, b"value", context="after the restart")
    expect(node.get("overwritten"), 200, b"new", context="after the restart")
    expect(node.get("deleted"), 404, context="after the restart")


@rule("4.1")
@pytest.mark.controls("kill", "start")
@pytest.mark.lone_node(ALONE)
def test_every_acknowledged_write_survives_kill_9(node: Node) -> None:
    keys = [f"key-{i:03d}" for i in range(200)]
    deleted = set(keys[::10])
    for key in keys:
        expect(node.put(key, key.encode()), 201)
    for key in sorted(deleted):
        expect(node.delete(key), 202)
    expect(node.put(keys[-1], b"last"), 201)
    node.kill()  # at once after the last acknowledgement
    node.start()
    for key in keys:
        context = f"{key} after kill -9 and restart"
        if key in deleted:
            expect(node.get(key), 404, context=context)
        else:
            expect(
                node.get(key), 200, b"last" if key == keys[-1] else key.encode(), context=context
            )
