"""SPEC.md section 6: with a cluster secret set, a client cannot forge a version or a
replica write; the nodes themselves, carrying the secret, replicate as usual."""

from __future__ import annotations

from dht.clock import MAX_VERSION
from dht.record import Record, encode
from dht.wire import RECORD_PATH, SECRET_HEADER
from tests.fixtures import ClusterFactory
from tests.launcher import Node, request


def forge(node: Node, key: str, headers: dict[str, str]) -> int:
    """A replica write with the highest possible version, as a forger would send it."""
    url = f"{node.url}{RECORD_PATH}?id={key}"
    return request("PUT", url, encode(Record.live(MAX_VERSION, b"forged")), headers=headers).status


def test_with_a_secret_internal_requests_without_it_are_refused(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, ["--secret", "s3cret"])
    assert cluster[0].put("account", b"real").status == 201
    assert forge(cluster[1], "account", {}) == 403
    assert forge(cluster[1], "account", {SECRET_HEADER: "guess"}) == 403
    refused = request("GET", f"{cluster[1].url}/internal/v0/records?start=a")
    assert refused.status == 403
    for node in cluster:
        answer = node.get("account", "3/3")
        assert (answer.status, answer.body) == (200, b"real")


def test_with_a_secret_nodes_still_replicate_and_read_each_other(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, ["--secret", "s3cret"])
    assert cluster[0].put("shared", b"v", "3/3").status == 201
    assert cluster[2].get("shared", "3/3").body == b"v"
    assert cluster[1].range("shared").body == b"shared\nv"
    assert all("shared" in node.local_records() for node in cluster)


def test_without_a_secret_a_replica_write_carrying_a_version_is_taken(
    start_cluster: ClusterFactory,
) -> None:
    """The default is open internal paths, as documented: the secret is what closes them."""
    node = start_cluster(1)[0]
    assert forge(node, "open", {}) == 201
    assert node.get("open").body == b"forged"
