"""SPEC.md rules 11.4 and 11.5: with a cluster secret set, a client cannot forge a version or a
replica write; the nodes themselves, carrying the secret, replicate as usual. Internal
traffic carries the sender's ring identity, and a node with another ring refuses it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import HOST, request
from dht.conformance.launcher import Node, free_ports
from dht.conformance.peer_tools import peer_hello, proof_header, replica_call
from dht.conformance.rules import rule
from dht.limits import REQUEST_WINDOW_MS
from dht.model.clock import version_at, wall_clock_ms
from dht.model.record import Record
from dht.transport.messages import PutRecord, RecordAbsent, RecordFound, Refused, Stored
from dht.transport.proof import new_nonce, request_proof
from dht.transport.wire import PROOF_HEADER, RING_HEADER

pytestmark = pytest.mark.dht


def write_with(node: Node, key: str, secret: str | None = None, **hello: str) -> object:
    """A replica write, newer than any before it, on a channel opened with `hello`'s
    fields changed and a proof made with `secret` (the node's own by default)."""
    record = Record.live(version_at(wall_clock_ms()), b"forged")
    return replica_call(
        node,
        lambda call_id: PutRecord(call_id, key.encode(), record),
        dataclasses.replace(peer_hello(node), **hello),
        secret,
    )


@rule("11.4")
def test_with_a_secret_a_channel_without_it_is_refused(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, ["--secret", "s3cret"])
    assert cluster[0].put("account", b"real").status == 201
    for offered in ("", "guess"):
        answer = write_with(cluster[1], "account", secret=offered)
        assert isinstance(answer, Refused), answer
        assert "secret" in answer.reason
    refused = request("GET", f"{cluster[1].url}/internal/v0/records?start=a")
    assert refused.status == 403
    records = f"{cluster[1].url}/internal/v0/records?start=a"
    guessed = request("GET", records, headers=proof_header("guess", "GET", records))
    assert guessed.status == 403
    assert "wrong proof" in guessed.text
    proven = proof_header("s3cret", "GET", records)
    assert request("GET", records, headers=proven).status == 200
    replayed = request("GET", records, headers=proven)
    assert replayed.status == 403 and "replay" in replayed.text, replayed
    elsewhere = request("GET", records + "&end=z", headers=proof_header("s3cret", "GET", records))
    assert elsewhere.status == 403, elsewhere  # a proof is for its own target only
    long_ago = wall_clock_ms() - REQUEST_WINDOW_MS - 60_000
    target = "/internal/v0/records?start=a"
    old = request_proof("s3cret", cluster[1].url, "GET", target, long_ago, new_nonce(), b"")
    late = request("GET", records, headers={PROOF_HEADER: old})
    assert late.status == 403 and "over the 300 s allowed" in late.text, late
    for node in cluster:
        answer = node.get("account", "3/3")
        assert (answer.status, answer.body) == (200, b"real")


@rule("11.4")
def test_with_a_secret_nodes_still_replicate_and_read_each_other(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, ["--secret", "s3cret"])
    assert cluster[0].put("shared", b"v", "3/3").status == 201
    assert cluster[2].get("shared", "3/3").body == b"v"
    assert cluster[1].range("shared").body == b"shared\nv"
    assert all("shared" in node.local_records() for node in cluster)
    assert write_with(cluster[1], "shared", secret="s3cret") == Stored(1, True)
    found = cluster[1].get_local("shared")
    assert isinstance(found, RecordFound)
    assert found.record.value == b"forged"


@rule("11.4")
def test_without_a_secret_a_replica_write_with_a_sane_version_is_taken(
    start_cluster: ClusterFactory,
) -> None:
    """The default of a lone `node` is an open channel, as documented (and warned about
    at start): the secret is what closes it."""
    node = start_cluster(1)[0]
    assert write_with(node, "open") == Stored(1, True)
    assert node.get("open").body == b"forged"
    assert "no --secret" in node.log_tail()


@rule("11.5")
def test_a_peer_with_another_ring_is_refused_on_the_channel_and_over_http(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1)[0]
    answer = write_with(node, "elsewhere", ring="0123456789abcdef")
    assert isinstance(answer, Refused), answer
    assert "0123456789abcdef" in answer.reason
    assert peer_hello(node).ring in answer.reason
    conflict = request(
        "GET", f"{node.url}/internal/v0/records?start=a", headers={RING_HEADER: "0123456789abcdef"}
    )
    assert conflict.status == 409
    assert "0123456789abcdef" in conflict.text


@rule("11.5")
def test_a_peer_speaking_another_protocol_version_is_refused(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1)[0]
    record = Record.live(1_000, b"v")
    answer = replica_call(
        node,
        lambda call_id: PutRecord(call_id, b"k", record),
        dataclasses.replace(peer_hello(node), version=99),
    )
    assert isinstance(answer, Refused), answer
    assert "protocol version 99" in answer.reason
    assert node.get("k").status == 404


@rule("11.5")
def test_nodes_started_with_different_cluster_lists_do_not_ack_for_each_other(
    tmp_path: Path,
) -> None:
    """Node A believes the cluster is A and B; node B believes it is B alone. A's 2/2
    writes used to be acknowledged by B; now B refuses A's channel (409-like), A counts
    it as a failed replica, and its status says which peer disagrees and why."""
    port_a, port_b = free_ports(2)
    url_a, url_b = f"http://{HOST}:{port_a}", f"http://{HOST}:{port_b}"
    a = Node(port_a, tmp_path / "a", url_a, [url_a, url_b])
    b = Node(port_b, tmp_path / "b", url_b, [url_b])
    try:
        a.start()
        b.start()
        for index in range(5):
            answer = a.put(f"k{index}", b"v", "2/2")
            assert answer.status in (503, 504), answer.text
        assert a.put("one-copy", b"v", "1/2").status in (201, 503)
        peer = json.loads(request("GET", f"{url_a}/v0/status").body)["peers"][url_b]
        assert "ring identity" in (peer["channel_refused"] or ""), peer
        assert a.log_tail(200).count("refused the replica channel: ring identity") == 1
        assert b.get_local("k0") == RecordAbsent(1)
    finally:
        a.stop()
        b.stop()


@rule("11.4")
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_captured_internal_request_is_refused_after_the_node_restarts(
    start_cluster: ClusterFactory, stop: str
) -> None:
    """An internal request taken once is refused again for as long as its time is in
    the window, a restart of the receiver (stopped, or killed) in between."""
    node = start_cluster(1, ["--secret", "s3cret"])[0]
    assert node.put("account", b"real").status == 201
    records = f"{node.url}/internal/v0/records?start=a"
    captured = proof_header("s3cret", "GET", records)
    assert request("GET", records, headers=captured).status == 200
    if stop == "SIGKILL":
        node.kill()
        node.start()
    else:
        node.restart()
    replayed = request("GET", records, headers=captured)
    assert replayed.status == 403 and "replay" in replayed.text, replayed
    fresh = proof_header("s3cret", "GET", records)
    assert request("GET", records, headers=fresh).status == 200
