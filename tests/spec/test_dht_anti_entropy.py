"""SPEC.md rules 9.9 and 9.10 on real clusters: anti-entropy converges replicas that
neither read repair nor hints healed, and tombstones are collected without bringing
deleted data back."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect, request, wait_for
from dht.conformance.launcher import LOWEST_KEY, Cluster, Node
from dht.conformance.peer_tools import internal_request
from dht.conformance.rules import rule
from dht.model.clock import version_at, wall_clock_ms
from dht.model.record import Record
from dht.transport.messages import Stored

pytestmark = pytest.mark.dht

# Hints off, so that only anti-entropy can heal; exchanges every half second.
ANTI_ENTROPY_ONLY = ["--hint-max-bytes", "0", "--anti-entropy-interval", "0.5"]
CONVERGE_WITHIN = 20.0
HOUR = 3600
# A 1 s grace with clocks that agree (one machine): a drift bound small next to the
# grace, so exchanges stop handing a tombstone to a node without it once it is past the
# grace (rule 9.10: the grace, and at least half of it plus twice the drift).
SHORT_GRACE = ["--tombstone-grace", "1", "--max-clock-drift", "0.25"]


def versions(records: dict[str, Record]) -> dict[str, tuple[int, bool]]:
    return {key: (record.version, record.tombstone) for key, record in records.items()}


def wait_until_same_records(cluster: Cluster, lagging: Node) -> dict[str, Record]:
    """Polls until `lagging` holds exactly the records of the first other node."""
    model = next(node for node in cluster if node is not lagging)
    wait_for(
        lambda: versions(lagging.local_records()) == versions(model.local_records()),
        lambda same: same,
        deadline=CONVERGE_WITHIN,
    )
    return lagging.local_records()


@rule("9.9")
def test_a_replica_that_missed_writes_with_hints_off_converges_by_anti_entropy_alone(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, ANTI_ENTROPY_ONLY)
    for i in range(20):
        expect(cluster[0].put(f"before-{i}", b"old"), 201)
    cluster[2].stop()
    for i in range(40):
        expect(cluster[i % 2].put(f"missed-{i}", f"value {i}".encode()), 201)
    for i in range(0, 20, 4):
        expect(cluster[1].delete(f"before-{i}"), 202)
    cluster[2].start()  # no read of any key from here on: only anti-entropy can heal
    records = wait_until_same_records(cluster, cluster[2])
    assert len([k for k in records if k.startswith("missed-")]) == 40
    assert all(records[f"before-{i}"].tombstone for i in range(0, 20, 4))
    # Either side of an exchange may start it: C pulls what it lacks, or A and B push
    # it; whoever came first, anti-entropy moved every missed write and delete to C.
    pulled = [cluster[2].status()["peers"][url]["anti_entropy"] for url in cluster.urls[:2]]
    pushed = [node.status()["peers"][cluster[2].url]["anti_entropy"] for node in cluster.nodes[:2]]
    moved = sum(p["records_received"] for p in pulled) + sum(p["records_sent"] for p in pushed)
    assert moved >= 45, (pulled, pushed)


@rule("9.9")
def test_a_node_whose_data_directory_is_deleted_is_rebuilt_by_anti_entropy(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, ANTI_ENTROPY_ONLY)
    for i in range(300):
        expect(cluster[i % 3].put(f"key-{i:03d}", f"value {i}".encode()), 201)
    expect(cluster[0].delete("key-000"), 202)
    wiped = cluster[1]
    wiped.stop()
    shutil.rmtree(wiped.data_dir)
    wiped.start()
    assert wiped.local_records() == {}
    records = wait_until_same_records(cluster, wiped)
    assert len(records) == 300 and records["key-000"].tombstone


@rule("9.10")
def test_a_replica_that_missed_a_delete_does_not_bring_the_value_back_after_collection(
    start_cluster: ClusterFactory,
) -> None:
    """The classic zombie: C misses a delete; A and B must not drop the tombstone while
    C, which still holds the value, has not exchanged with them since the delete."""
    cluster = start_cluster(3, [*ANTI_ENTROPY_ONLY, *SHORT_GRACE])
    expect(cluster[0].put("zombie", b"deleted value"), 201)
    expect(cluster[0].put("kept", b"live value"), 201)
    wait_for(lambda: ["zombie" in n.local_records() for n in cluster], all, deadline=5.0)
    cluster[2].stop()
    expect(cluster[0].delete("zombie", "2/3"), 202)
    # Well past the grace, with collection passes every 0.25 s: the tombstone stays,
    # since C has not exchanged with A or B since the delete.
    wait_for(lambda: cluster[0].status()["tombstones"]["passes"], lambda p: p >= 8, deadline=10.0)
    for node in cluster.nodes[:2]:
        kept = node.local_records().get("zombie")
        assert kept is not None and kept.tombstone, f"{node.url} dropped the tombstone: {kept}"
    cluster[2].start()
    # C gets the tombstone by anti-entropy, then every node collects it...
    for node in cluster:
        wait_for(
            lambda n=node: "zombie" in n.local_records(),
            lambda present: not present,
            deadline=CONVERGE_WITHIN,
        )
    # ...and the value never comes back, from any node, by reads or by later exchanges.
    for node in cluster:
        expect(node.get("zombie", "3/3"), 404, context=f"{node.url} after collection")
        expect(node.get("kept"), 200, b"live value")
    wait_for(
        lambda: cluster[2].status()["peers"][cluster.urls[0]]["anti_entropy"]["exchanges"],
        lambda n: n >= 3,
        deadline=10.0,
    )
    for node in cluster:
        assert "zombie" not in node.local_records(), f"{node.url} holds the key again"


@rule("9.10", "8.6")
def test_expired_records_are_collected_once_past_the_grace(start_cluster: ClusterFactory) -> None:
    cluster = start_cluster(3, [*ANTI_ENTROPY_ONLY, *SHORT_GRACE])
    for i in range(10):
        url = cluster[0].url + f"/v0/entity?id=expiring-{i}&ttl=1"
        assert request("PUT", url, body=b"short-lived").status == 201
    expect(cluster[0].put("permanent", b"stays"), 201)
    for node in cluster:
        wait_for(
            lambda n=node: sorted(n.local_records(LOWEST_KEY)),
            lambda keys: keys == ["permanent"],
            deadline=CONVERGE_WITHIN,
        )
    assert cluster[0].status()["tombstones"]["collected"] == 10


@rule("11.4")
def test_the_exchange_endpoint_wants_the_secret_and_answers_bad_requests_400(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(2, ["--secret", "exchange-secret"])
    url = cluster[0].url + "/internal/v0/anti-entropy"
    ask = {"op": "hashes", "level": 0, "nodes": [0], "peer": cluster.urls[1]}
    assert request("POST", url, json.dumps(ask).encode()).status == 403
    wait_for(lambda: cluster[0].status()["anti_entropy"]["trees_ready"], bool)
    answer = internal_request(cluster[0], "POST", url, json.dumps(ask).encode())
    assert answer.status == 200 and len(json.loads(answer.body)["hashes"]) == 1, answer
    for bad in [
        b"not json",
        b"[1]",
        json.dumps(ask | {"peer": "http://stranger:1"}).encode(),
        json.dumps(ask | {"level": 99}).encode(),
        json.dumps(ask | {"op": "x"}).encode(),
    ]:
        refused = internal_request(cluster[0], "POST", url, bad)
        assert refused.status == 400, (bad, refused)
    assert request("GET", cluster[0].url + "/v0/status").status == 200


@rule("9.9", "9.10")
def test_collected_tombstones_are_not_handed_back_and_forth(start_cluster: ClusterFactory) -> None:
    """Nodes collect a tombstone at slightly different times; the one that still holds
    it must not copy it back to one that already removed it (it reads the same there)."""
    cluster = start_cluster(3, [*ANTI_ENTROPY_ONLY, *SHORT_GRACE])
    keys = [f"deleted-{i:03d}" for i in range(200)]
    for key in keys:
        expect(cluster[0].put(key, b"v"), 201)
    for key in keys:
        expect(cluster[1].delete(key, "3/3"), 202)
    for node in cluster:
        wait_for(lambda n=node: len(n.local_records()), lambda left: left == 0, deadline=30.0)
    moved = sum(
        peer["anti_entropy"]["records_sent"] + peer["anti_entropy"]["records_received"]
        for node in cluster
        for peer in node.status()["peers"].values()
    )
    # 0 in practice (21 when they were handed back); a few may race the writes' own
    # background replication.
    assert moved <= 5, f"{moved} records copied for {len(keys)} collected"


@rule("9.9", "8.4")
def test_a_record_the_peer_refuses_as_too_far_ahead_does_not_stop_the_rest_of_the_exchange(
    tmp_path: Path,
) -> None:
    """A node whose clock is an hour ahead holds a record of its own time, which its peer
    refuses (rule 8.4); the exchange goes on past it, both ways, and completes. Only the
    ahead node starts exchanges, so nothing else can carry the other records across;
    the refused key sorts first, so it is met before any of them. Such an exchange does
    not let tombstones go (rule 9.10): the ahead node keeps one both hold, though it
    has been dead past the grace on its clock for an hour."""
    cluster = Cluster(tmp_path, 2, ["--hint-max-bytes", "0", "--tombstone-grace", "1"])
    ahead, peer = cluster
    ahead.extra_args += ["--clock-skew", str(HOUR), "--anti-entropy-interval", "0.5"]
    peer.extra_args += ["--anti-entropy-interval", "0"]
    try:
        cluster.start()
        future = Record.live(version_at(wall_clock_ms() + HOUR * 1000), b"from the future")
        assert ahead.put_local("a-ahead", future) == Stored(1, True)
        now = version_at(wall_clock_ms())
        for node in cluster:
            assert node.put_local("deleted", Record.deleted(now)) == Stored(1, True)
        for index in range(10):
            assert ahead.put_local(f"b-{index}", Record.live(now, b"v")) == Stored(1, True)
            assert peer.put_local(f"c-{index}", Record.live(now, b"v")) == Stored(1, True)
        for node, prefix in [(peer, "b-"), (ahead, "c-")]:
            wait_for(
                lambda n=node, p=prefix: len([k for k in n.local_records() if k.startswith(p)]),
                lambda count: count == 10,
                deadline=CONVERGE_WITHIN,
            )
        assert "a-ahead" not in peer.local_records()
        exchanges = wait_for(
            lambda: ahead.status()["peers"][peer.url]["anti_entropy"],
            lambda stats: stats["exchanges"] >= 1 and stats["last_error"] is None,
            deadline=CONVERGE_WITHIN,
        )
        assert exchanges["records_refused"] >= 1, exchanges
        assert exchanges["records_sent"] >= 10 and exchanges["records_received"] >= 10
        assert "refused by" in ahead.log_tail(50)
        passes = ahead.status()["tombstones"]["passes"]
        wait_for(lambda: ahead.status()["tombstones"]["passes"], lambda p: p >= passes + 4)
        assert ahead.local_records()["deleted"].tombstone
        assert ahead.status()["tombstones"]["collected"] == 0
    finally:
        cluster.stop()


@rule("9.10", "9.6")
def test_a_tombstone_reaches_a_replica_without_the_key_while_an_older_hint_may_land(
    tmp_path: Path,
) -> None:
    """A tombstone whose version is 7.5 s behind the holder's clock (its coordinator's
    clock ran behind, within --max-clock-drift) is past the 8 s grace on the holder's
    clock 0.5 s after it arrived. The peer holds no record of the key; within half the
    grace of the delete, a hint of the older value (played here by a replica write) may
    still land there. The exchange must have copied the tombstone to it first, or the
    holder collects the tombstone and its next exchange copies the old value back. The
    holder exchanges every 10 s and the peer never, so the exchanges fall where the
    test puts them."""
    cluster = Cluster(tmp_path, 2, ["--hint-max-bytes", "0", "--tombstone-grace", "8"])
    holder, peer = cluster
    holder.extra_args += ["--anti-entropy-interval", "10"]
    peer.extra_args += ["--anti-entropy-interval", "0"]
    try:
        cluster.start()

        def exchange_stats() -> dict[str, object]:
            return holder.status()["peers"][peer.url]["anti_entropy"]

        first = wait_for(exchange_stats, lambda stats: stats["exchanges"] >= 1, deadline=30.0)
        # The next exchange starts 10 s after this one completed; the delete lands 2.5 s
        # before it.
        time.sleep(max(0.0, first["last_completed"] + 7.5 - time.time()))
        deleted_ms = wall_clock_ms()
        tombstone = Record.deleted(version_at(deleted_ms - 7_500))
        assert holder.put_local("key", tombstone) == Stored(1, True)
        wait_for(exchange_stats, lambda stats: stats["exchanges"] >= 2, deadline=15.0)
        landed_ms = wall_clock_ms()
        assert landed_ms - deleted_ms < 4_000, "too slow: a hint would have been dropped"
        peer.put_local("key", Record.live(version_at(deleted_ms - 10_000), b"deleted value"))
        # The holder collects the tombstone (8 s after it arrived), then exchanges again.
        wait_for(exchange_stats, lambda stats: stats["exchanges"] >= 3, deadline=20.0)
        for node in cluster:
            kept = node.local_records().get("key")
            assert kept is None or kept.tombstone, f"{node.url} holds the value again: {kept}"
            expect(node.get("key", "2/2"), 404, context=node.url)
    finally:
        cluster.stop()
