"""SPEC.md rule 8.4: a version from another node is taken only if it is at most
--max-clock-drift ahead of this node's clock, so no forged version and no node with a
runaway clock can break writes or push the cluster into the future."""

from __future__ import annotations

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import wait_for
from dht.conformance.rules import rule
from dht.model.clock import MAX_VERSION, version_at, version_ms, wall_clock_ms
from dht.model.record import Record
from dht.transport.messages import Failed, RecordFound, Stored

pytestmark = pytest.mark.dht

YEAR = 365 * 24 * 3600


@rule("8.4")
def test_a_forged_maximal_version_is_refused_and_every_write_still_works(
    start_cluster: ClusterFactory,
) -> None:
    """The forged-version bug: one replica write with version 2^64-1, sent with no
    secret to a node started without one, made every later write of the node a 500."""
    node = start_cluster(1)[0]
    forged = node.put_local("victim", Record.live(MAX_VERSION, b"evil"))
    assert isinstance(forged, Failed), forged
    assert "ahead of this node's clock" in forged.reason
    assert node.get("victim").status == 404
    for key in ("victim", "any-other"):
        assert node.put(key, b"good").status == 201
        answer = node.get(key)
        assert (answer.status, answer.body) == (200, b"good")
    assert node.status()["versions_refused"] == 1
    assert "refused a replica write of b'victim'" in node.log_tail()


@rule("8.4")
def test_a_version_within_the_drift_is_taken_and_one_past_it_is_not(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--max-clock-drift", "30"])[0]
    now = wall_clock_ms()
    assert node.put_local("near", Record.live(version_at(now + 20_000), b"v")) == Stored(1, True)
    far = node.put_local("far", Record.live(version_at(now + 40_000), b"v"))
    assert isinstance(far, Failed), far
    # A write after the accepted one is still newer: the clock moved past it.
    assert node.put("near", b"later").status == 201
    assert node.get("near").body == b"later"


@rule("8.4", "9.13")
def test_a_node_a_year_ahead_cannot_push_the_cluster_into_the_future(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, ["--breaker-threshold", "1000"])
    skewed = cluster[2]
    skewed.extra_args += ["--clock-skew", str(YEAR)]
    skewed.restart()
    healthy = cluster.nodes[:2]

    # The skewed node serves no client (rule 9.13), so it writes nothing of its time...
    answer = skewed.put("through-skewed", b"future", "2/3")
    assert answer.status == 503 and "clock" in answer.text, answer.text
    # ...but a record of its time (one written before it knew, say) reaches no other node.
    future = Record.live(version_at(wall_clock_ms() + YEAR * 1000), b"future")
    assert skewed.put_local("through-skewed", future) == Stored(1, True)
    for node in healthy:
        declined = node.put_local("through-skewed", future)
        assert isinstance(declined, Failed) and "ahead of this node's clock" in declined.reason
        assert node.get_local("through-skewed") == node.get_local("never-written")

    # Writes through healthy nodes carry today's versions, and reach the skewed node too.
    assert healthy[0].put("through-healthy", b"today", "3/3").status == 201
    found = skewed.get_local("through-healthy")
    assert isinstance(found, RecordFound)
    assert abs(version_ms(found.record.version) - wall_clock_ms()) < 60_000

    # The skewed node holds its own future copy of the first key; reads ignore it...
    for node in healthy:
        reads = node.get("through-skewed", "2/3")
        assert reads.status == 404, reads.text
    assert healthy[0].get("through-skewed", "3/3").status == 504
    # ...and a healthy write of that key is not buried under it for a year.
    assert healthy[1].put("through-skewed", b"today", "2/3").status == 201
    assert healthy[0].get("through-skewed", "2/3").body == b"today"

    refused = wait_for(
        lambda: [node.status()["versions_refused"] for node in healthy],
        lambda counts: all(count >= 1 for count in counts),
    )
    for node in healthy:
        after = node.put(f"after-{node.port}", b"v", "2/3")
        assert after.status == 201
        record = node.get_local(f"after-{node.port}")
        assert isinstance(record, RecordFound)
        assert abs(version_ms(record.record.version) - wall_clock_ms()) < 60_000
    print(f"\nyear-ahead node: versions refused by the healthy nodes: {refused}")
