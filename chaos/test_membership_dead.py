"""When a node is gone for good (SPEC.md rules 13.7 to 13.9): it is removed, or
replaced, with `membership --dead`, under load, with the history checker on.

- kill -9 one of 4 nodes and remove it: what it held reaches its new owners from the
  copies the others have, once per key that lacked a copy;
- kill -9 one of 3 and replace it with a new node in the same change: the new node is
  filled from the survivors;
- a second node dies in the middle of a removal's streaming: the change stops within
  10 s naming it, and goes on to its end once it is back;
- the dead node comes back after its removal: it answers its clients 503 saying it was
  removed, and plants nothing in the new ring.

Every case: 0 acknowledged writes lost, 0 stale reads, and at the end every key sits on
exactly its owners, checked on each node's own records. The preload writes at 2/3, so
on 4 nodes a key has 3 copies and a dead node's keys lack one. DHT_MEMBERSHIP_RECORDS
sets how many (default 3000). Run with -s to see the figures.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.test_membership import (
    CLIENT_TIMEOUT,
    KEYS,
    RECORDS,
    SEED,
    SETTINGS,
    Change,
    await_exact_placement,
    finish,
    joining,
    placement_errors,
    preload,
    start,
)
from dht.config import NodeConfig
from dht.conformance.http_client import expect, wait_for
from dht.conformance.launcher import Cluster
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix
from dht.history.run_folder import FaultWindow
from dht.membership.driver import ChangeFailed
from dht.model.ring import Ring

PRELOAD_REPLICAS = "2/3"


def lacking_a_copy(urls: list[str], dead: str, count: int) -> int:
    """How many preloaded keys had a copy on the dead node: each lacks one after it."""
    ring = Ring(urls, NodeConfig.vnodes)
    return sum(dead in ring.replicas_for(f"preload-{i:06d}".encode(), 3) for i in range(count))


@rule("13.8")
def test_kill_one_of_four_and_remove_it_as_dead_under_load(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 4, SETTINGS)
    nodes = cluster.nodes
    try:
        start(nodes)
        preload(nodes[1], RECORDS, PRELOAD_REPLICAS)
        survivors = nodes[1:]
        clients = Clients(survivors[:2], KEYS, 4, SEED, CLIENT_TIMEOUT, Mix()).start()
        time.sleep(1.0)
        killed_at = time.monotonic()
        nodes[0].kill()
        lacking = lacking_a_copy(cluster.urls, nodes[0].url, RECORDS)
        change = Change(survivors, [node.url for node in survivors], dead=[nodes[0].url])
        report = change.wait()
        await_exact_placement(survivors, [])
        sent = sum(report.sent.values())
        print(
            f"\nremove a dead node: {lacking} of {RECORDS} preloaded keys lacked a copy; "
            f"{sent} records streamed ({sent / lacking:.3f} per key that lacked one)"
        )
        fault = FaultWindow("kill -9 node1 (gone for good)", killed_at, time.monotonic())
        finish(
            "membership-remove-dead",
            clients,
            survivors[:2],
            [("remove node1 --dead", change)],
            [fault],
        )
        assert lacking <= sent <= lacking * 1.05 + len(KEYS), (sent, lacking)
    finally:
        cluster.stop()


@rule("13.8")
def test_kill_one_of_three_and_replace_it_with_a_new_node(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 4, SETTINGS)
    nodes = cluster.nodes
    try:
        for node in nodes[:3]:
            node.topology = cluster.urls[:3]
        start(nodes[:3])
        preload(nodes[0], RECORDS)
        survivors = nodes[:2]
        clients = Clients(survivors, KEYS, 4, SEED, CLIENT_TIMEOUT, Mix()).start()
        killed_at = time.monotonic()
        nodes[2].kill()
        start([joining(nodes[3], survivors)])
        new = [*survivors, nodes[3]]
        change = Change(survivors, [node.url for node in new], dead=[nodes[2].url])
        report = change.wait()
        await_exact_placement(new, [])
        sent = sum(report.sent.values())
        print(f"\nreplace a dead node: {sent} records streamed to the new node for {RECORDS}")
        fault = FaultWindow("kill -9 node3 (gone for good)", killed_at, time.monotonic())
        finish("membership-replace", clients, survivors, [("replace node3", change)], [fault])
        assert RECORDS <= sent <= RECORDS * 1.05 + len(KEYS), sent
    finally:
        cluster.stop()


@rule("13.7", "13.8")
def test_a_second_node_dying_mid_streaming_stops_the_removal_until_it_is_back(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 4, SETTINGS)
    nodes = cluster.nodes
    try:
        start(nodes)
        preload(nodes[1], RECORDS, PRELOAD_REPLICAS)
        survivors = nodes[1:]
        clients = Clients(survivors[:2], KEYS, 4, SEED, CLIENT_TIMEOUT, Mix()).start()
        killed_at = time.monotonic()
        nodes[0].kill()
        urls = [node.url for node in survivors]
        change = Change(survivors, urls, dead=[nodes[0].url])
        second = survivors[2]
        wait_for(
            lambda: second.status()["membership"]["handoff"],
            lambda handoff: handoff["state"] == "streaming" and handoff["scanned"] > 0,
            deadline=60.0,
        )
        second_at = time.monotonic()
        second.kill()
        with pytest.raises(ChangeFailed) as stopped:
            change.wait(deadline=30.0)
        stopped_after = time.monotonic() - second_at
        assert second.url in str(stopped.value) and "did not answer" in str(stopped.value)
        second.start()
        restarted_at = time.monotonic()
        again = Change(survivors, urls, dead=[nodes[0].url])
        again.wait()
        await_exact_placement(survivors, [])
        print(f"\nthe removal stopped {stopped_after:.1f} s after the second node died")
        faults = [
            FaultWindow("kill -9 node1 (gone for good)", killed_at, time.monotonic()),
            FaultWindow("remove node1 --dead, stopped", change.began, change.ended or second_at),
            FaultWindow("kill -9 node4 mid-stream, restart", second_at, restarted_at),
        ]
        finish(
            "membership-second-death",
            clients,
            survivors[:2],
            [("remove node1 --dead, run again", again)],
            faults,
        )
        assert stopped_after < 15.0, stopped_after
    finally:
        cluster.stop()


@rule("13.9")
def test_a_dead_node_that_comes_back_after_its_removal_is_fenced(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 4, SETTINGS)
    nodes = cluster.nodes
    try:
        start(nodes)
        for key in KEYS:
            expect(nodes[1].put(key, b"before"), 201)
        expect(nodes[1].put("deleted-while-away", b"old"), 201)
        returning = nodes[0]
        returning.kill()
        survivors = nodes[1:]
        Change(survivors, [node.url for node in survivors], dead=[returning.url]).wait()
        for key in KEYS:
            expect(nodes[1].put(key, b"after"), 201)
        expect(nodes[1].delete("deleted-while-away"), 202)
        returning.start()
        fenced = returning.get(KEYS[0])  # its first answer: it asks its peers before serving
        assert fenced.status == 503, fenced
        assert b"removed from the cluster" in fenced.body, fenced
        assert b"--join" in fenced.body, fenced
        assert returning.status()["fenced"], returning.status()
        expect(returning.put("planted", b"stale"), 503)
        # Not even from its own data, which is stale: "before" at 1/4 without the fence.
        expect(returning.get(KEYS[0], "1/4"), 503)
        time.sleep(2.0)  # hint delivery and anti-entropy rounds of the returning node
        for node in survivors:
            for key in KEYS:
                expect(node.get(key), 200, b"after")
            expect(node.get("deleted-while-away"), 404)
            expect(node.get("planted"), 404)
            assert not node.local_records().get("planted")
        returning.stop()
        returning.start()  # fenced from its first answer after a restart
        answer = returning.get(KEYS[0])
        assert answer.status == 503 and b"removed" in answer.body, answer
    finally:
        cluster.stop()


@rule("13.8")
def test_the_newest_copy_moves_when_the_first_keeper_missed_the_write(tmp_path: Path) -> None:
    """The dead node took a write, a delete and a new key with one keeper while the
    first keeper was down, then its disk (and its hints) were lost. Found by a review:
    the first keeper alone used to send, its own older copy or nothing. With
    anti-entropy off, only the handoff can put the newest copy on every owner."""
    cluster = Cluster(tmp_path, 4, [*SETTINGS, "--anti-entropy-interval", "0"])
    nodes = cluster.nodes
    dead, first = nodes[0], nodes[1]
    ring = Ring(cluster.urls, NodeConfig.vnodes)
    keys = []
    for index in range(2000):
        key = f"k-{index:04d}"
        held = ring.replicas_for(key.encode(), 3)
        if dead.url in held and next(url for url in held if url != dead.url) == first.url:
            keys.append(key)
    updated, deleted, fresh = keys[:3]
    try:
        start(nodes)
        expect(first.put(updated, b"old", "2/3"), 201)
        expect(first.put(deleted, b"deleted", "2/3"), 201)
        for key in (updated, deleted):
            owners = [node for node in nodes if node.url in ring.replicas_for(key.encode(), 3)]
            wait_for(lambda owners=owners, key=key: [key in n.local_records() for n in owners], all)
        first.kill()  # it misses what the dead node coordinates now
        expect(dead.put(updated, b"new", "2/3"), 201)
        expect(dead.delete(deleted, "2/3"), 202)
        expect(dead.put(fresh, b"fresh", "2/3"), 201)
        dead.kill()  # its disk is lost, and its hints for the first keeper with it
        first.start()
        survivors = nodes[1:]
        Change(survivors, [node.url for node in survivors], dead=[dead.url]).wait()
        for key, want in ((updated, b"new"), (deleted, None), (fresh, b"fresh")):
            for node in survivors:
                record = node.local_records().get(key)
                shown = None if record is None or record.tombstone else record.value
                assert shown == want, (key, node.url, record)
                assert record is not None, (key, node.url, "no copy, not even a tombstone")
        assert not placement_errors(survivors, [])
    finally:
        cluster.stop()


@rule("13.8")
def test_a_node_that_was_to_stay_lost_for_good_mid_stream_is_removed_after_the_change(
    tmp_path: Path,
) -> None:
    """Found by a review: such a node could be neither waited for nor named dead, so the
    change could never end. Named dead with the first, it is left out of the change
    under way, which finishes, and removed by a second change."""
    cluster = Cluster(tmp_path, 4, SETTINGS)
    nodes = cluster.nodes
    try:
        start(nodes)
        preload(nodes[1], RECORDS, PRELOAD_REPLICAS)
        first_dead, survivors = nodes[0], nodes[1:]
        clients = Clients(survivors[:2], KEYS, 4, SEED, CLIENT_TIMEOUT, Mix()).start()
        killed_at = time.monotonic()
        first_dead.kill()
        change = Change(survivors, [node.url for node in survivors], dead=[first_dead.url])
        second_dead = survivors[2]
        wait_for(
            lambda: second_dead.status()["membership"]["handoff"],
            lambda handoff: handoff["state"] == "streaming" and handoff["scanned"] > 0,
            deadline=60.0,
        )
        second_at = time.monotonic()
        second_dead.kill()  # and its disk is lost: it never comes back
        with pytest.raises(ChangeFailed):
            change.wait(deadline=30.0)
        remaining = survivors[:2]
        again = Change(
            remaining,
            [node.url for node in remaining],
            dead=[first_dead.url, second_dead.url],
            accept_loss=True,  # 2/3 keys on both dead nodes only: none were, all 3 took them
        )
        report = again.wait()
        await_exact_placement(remaining, [])
        states = [node.status()["membership"] for node in remaining]
        assert all(state["phase"] == "stable" for state in states), states
        assert all(sorted(state["current"]) == sorted(n.url for n in remaining) for state in states)
        print(f"\nboth removals done: {sum(report.sent.values())} records sent")
        faults = [
            FaultWindow("kill -9 node1 (gone for good)", killed_at, time.monotonic()),
            FaultWindow("kill -9 node4 mid-stream (gone for good)", second_at, time.monotonic()),
        ]
        finish(
            "membership-staying-node-lost",
            clients,
            remaining,
            [("finish without node4, remove it", again)],
            faults,
        )
    finally:
        cluster.stop()
