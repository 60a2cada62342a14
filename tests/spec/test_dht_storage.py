"""SPEC.md section 10: writes are in LevelDB's log before they are acknowledged, with
each `--durability`; writes taken together share a sync; SIGTERM acknowledges nothing it
did not sync."""

from __future__ import annotations

import re
import threading
import time

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect, wait_for
from dht.conformance.peer_tools import open_channel, send_frames
from dht.conformance.rules import rule
from dht.model.clock import version_at
from dht.model.record import Record
from dht.transport.messages import PutRecord, Stored, Welcome

pytestmark = pytest.mark.dht

WRITES = 64


@rule("10.2")
@pytest.mark.parametrize(
    "flags",
    [[], ["--durability", "none"], ["--durability", "each"], ["--sync-writes"]],
    ids=["group", "none", "each", "sync-writes"],
)
def test_every_acknowledged_write_is_in_the_log_when_the_process_dies(
    start_cluster: ClusterFactory, flags: list[str]
) -> None:
    node = start_cluster(1, flags)[0]
    durability = "group" if flags in ([], ["--sync-writes"]) else flags[1]
    assert node.status()["storage"]["durability"] == durability
    values = {f"logged-{i:03d}": f"value {i}".encode() * 50 for i in range(100)}
    for key, value in values.items():
        expect(node.put(key, value), 201)
    node.kill()
    node.start()
    for key, value in values.items():
        expect(node.get(key), 200, value, context=f"{key} after kill -9")


@rule("10.4", "12.4")
def test_writes_taken_together_share_fewer_syncs_than_writes(
    start_cluster: ClusterFactory,
) -> None:
    """WRITES replica writes sent in one piece on one channel reach the node together:
    each is answered STORED once synced, by far fewer syncs than writes."""
    node = start_cluster(1)[0]
    before = node.status()["storage"]
    version = version_at(int(time.time() * 1000))
    sock, codec = open_channel(node)
    with sock:
        calls = [PutRecord(i, b"group-%d" % i, Record.live(version, b"v")) for i in range(WRITES)]
        send_frames(sock, [frame for call in calls for frame in codec.send(call)])
        answers: list[object] = []
        while len(answers) < WRITES:
            while (event := codec.next_event()) is not None:
                if not isinstance(event, Welcome):
                    answers.append(event)
            if len(answers) < WRITES:
                data = sock.recv(65536)
                assert data, "the node closed the channel"
                codec.receive_data(data)
    assert sorted(answers, key=lambda answer: getattr(answer, "call_id", 0)) == [
        Stored(i, True) for i in range(WRITES)
    ]
    after = node.status()["storage"]
    syncs = after["syncs"] - before["syncs"]
    synced = after["synced_writes"] - before["synced_writes"]
    assert synced >= WRITES and 1 <= syncs < WRITES // 2, (before, after)
    metrics = node.metrics()
    assert metrics["dht_storage_syncs_total"] >= after["syncs"]
    assert metrics["dht_storage_synced_writes_total"] >= after["synced_writes"]
    expect(node.get("group-0"), 200, b"v")


@rule("10.4", "4.2")
def test_sigterm_with_writes_in_flight_acknowledges_only_synced_writes(
    start_cluster: ClusterFactory,
) -> None:
    """Clients keep writing while the node is stopped: every 201 is on the disk after the
    restart, and the node's last words count at least as many writes synced as it
    acknowledged (a write it answered before its sync would break that count)."""
    node = start_cluster(1)[0]
    acknowledged: list[str] = []
    stop = threading.Event()

    def client(number: int) -> None:
        index = 0
        while not stop.is_set():
            key = f"term-{number}-{index}"
            try:
                answer = node.put(key, b"x" * 100)
            except OSError:
                return  # the node closed the connection while stopping
            if answer.status == 201:
                acknowledged.append(key)
            index += 1

    clients = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in clients:
        thread.start()
    try:
        wait_for(lambda: len(acknowledged), lambda count: count >= 200)
        assert node.stop() == 0
    finally:
        stop.set()
        for thread in clients:
            thread.join()
    assert node.log_path is not None
    last_words = re.findall(
        r"stopped; (\d+) writes synced in (\d+) syncs", node.log_path.read_text()
    )
    assert last_words, node.log_tail()
    synced, syncs = map(int, last_words[-1])
    assert len(acknowledged) <= synced and syncs >= 1
    node.start()
    for key in acknowledged:
        expect(node.get(key), 200, b"x" * 100, context=f"{key} after SIGTERM")
