"""SPEC.md rule 8.6: records that expire (`ttl=SECONDS` on a PUT), and rule 10.3: data
written by the previous record format still reads."""

from __future__ import annotations

import json
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import entity_url, expect, request, wait_for
from dht.conformance.launcher import Cluster, Node
from dht.conformance.rules import rule
from dht.conformance.traffic import attempt
from dht.history.checker import CLOCK_SLACK, Kind, Op, check

pytestmark = pytest.mark.dht

DATA = Path(__file__).resolve().parents[1] / "data"


def put_with_ttl(node: Node, key: str, value: bytes, ttl: str) -> int:
    return request("PUT", entity_url(node.url, key) + f"&ttl={ttl}", body=value).status


@rule("8.6")
def test_an_expired_record_reads_as_absent_from_every_node_and_leaves_the_range(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    assert put_with_ttl(cluster[0], "short-lived", b"soon gone", "1") == 201
    assert cluster[0].put("kept", b"stays").status == 201
    for node in cluster:
        expect(node.get("short-lived"), 200, b"soon gone", context=f"{node.url} before expiry")
    for node in cluster:
        wait_for(lambda n=node: n.get("short-lived").status, lambda s: s == 404, deadline=5.0)
    for node in cluster:
        assert node.range_chunks("a").chunks == [b"kept\nstays"], node.url


@rule("8.6")
def test_a_later_put_without_ttl_makes_the_key_permanent_again(node: Node) -> None:
    assert put_with_ttl(node, "k", b"expiring", "1") == 201
    expect(node.put("k", b"permanent"), 201)
    assert put_with_ttl(node, "control", b"expiring", "1") == 201
    time.sleep(1.5)  # past both expiries: a time to let pass, not a condition to poll
    expect(node.get("control"), 404, context="the control key, 1.5 s after ttl=1")
    expect(node.get("k"), 200, b"permanent")


@rule("8.6")
def test_expiry_is_judged_by_the_clock_of_the_node_that_answers_the_read(
    start_cluster: ClusterFactory,
) -> None:
    """The expiry is a time on the write's coordinator's clock, and each node judges it
    by its own: through a node 1 s ahead, a ttl=2 record written through another reads
    as absent 1 s after the write, while the writer still reads it. The history checker,
    given the skew and its usual 10 ms as slack, takes that read as right."""
    skew = 1.0
    cluster = start_cluster(3)
    ahead = cluster[1]
    ahead.stop()
    ahead.extra_args += ["--clock-skew", str(skew)]
    ahead.start()
    write = attempt(cluster[0], Kind.PUT, "expiring", b"for 2 s", 5.0, ttl=2, node_name="node1")
    assert write.status == 201

    def read(node: Node, name: str) -> Op:
        return attempt(node, Kind.GET, "expiring", None, 5.0, node_name=name)

    reads = [read(ahead, "node2")]
    while reads[-1].status == 200 and time.monotonic() - write.invoked < 2.0:
        # Back to back from just before 1 s: the first 404 may then come back less than
        # 1 s after the PUT was invoked (the millisecond of rule 8.6).
        if time.monotonic() - write.invoked < 0.98:
            time.sleep(0.01)
        reads.append(read(ahead, "node2"))
    writer = read(cluster[0], "node1")
    gone = reads[-1]
    assert reads[0].status == 200 and gone.status == 404, reads
    assert writer.status == 200, "the writer's clock has 1 s to go"
    # Never earlier than the skew and a millisecond allow.
    assert gone.settled_by - write.invoked > 2 - skew - 0.001, (write, gone)
    final = wait_for(lambda: read(cluster[0], "node1"), lambda op: op.status == 404)
    history = [write, *reads, writer, final]
    report = check(
        history, {"expiring": None}, skew + CLOCK_SLACK, (final.invoked, final.settled_by)
    )
    assert report.ok, report.details()


@rule("8.6")
@pytest.mark.parametrize("ttl", ["0", "-1", "1.5", "abc", "", str(366 * 24 * 3600)])
def test_a_ttl_that_is_not_whole_seconds_from_1_to_a_year_answers_400(node: Node, ttl: str) -> None:
    assert put_with_ttl(node, "k", b"v", ttl) == 400
    expect(node.get("k"), 404, context="after the refused PUT")


@rule("10.3")
def test_a_data_directory_written_by_record_format_1_reads_and_takes_new_writes(
    tmp_path: Path,
) -> None:
    """tests/data/format-1-data-dir.tar.gz was written by dht before format 2 (commit
    67b339f): 20 keys, 4 of them deleted, and an empty value."""
    with tarfile.open(DATA / "format-1-data-dir.tar.gz") as archive:
        archive.extractall(tmp_path / "old", filter="data")
    cluster = Cluster(tmp_path / "cluster", 1)
    node = cluster[0]
    shutil.copytree(tmp_path / "old" / "node", node.data_dir)
    cluster.start()
    try:
        expected: dict[str, str | None] = json.loads((DATA / "format-1-records.json").read_text())
        for key, value in expected.items():
            if value is None:
                expect(node.get(key), 404, context=f"{key}, deleted under format 1")
            else:
                expect(node.get(key), 200, value.encode(), context=f"{key}, format 1")
        expect(node.put("v1-key-01", b"rewritten under format 2"), 201)
        expect(node.delete("v1-key-02"), 202)
        node.restart()
        expect(node.get("v1-key-01"), 200, b"rewritten under format 2")
        expect(node.get("v1-key-02"), 404)
        expect(node.get("v1-key-03"), 200, expected["v1-key-03"].encode())  # type: ignore[union-attr]
    finally:
        cluster.stop()
