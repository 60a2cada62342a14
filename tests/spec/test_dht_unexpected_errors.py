"""SPEC.md rule 7.8: what the node did not foresee is logged once with its traceback and
never hangs a client or stops the node. A record damaged on disk is such a case: the
local replica's failure counts as a failed replica, and a range that meets it is cut."""

from __future__ import annotations

import plyvel
import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.launcher import Node
from dht.conformance.rules import rule
from dht.storage.store import RECORDS_PREFIX

pytestmark = pytest.mark.dht


def damage(node: Node, key: bytes) -> None:
    node.stop()
    db = plyvel.DB(str(node.data_dir / "leveldb"))
    db.put(RECORDS_PREFIX + key, b"\x07 not a record")
    db.close()
    node.start()


@rule("7.8")
def test_a_damaged_record_is_a_failed_replica_logged_once_and_the_node_serves_on(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1)[0]
    assert node.put("healthy", b"v").status == 201
    damage(node, b"damaged")

    answer = node.get("damaged")
    assert answer.status == 504, answer.text
    log = node.log_tail(200)
    assert log.count("Traceback") == 1, log
    assert "CorruptRecord" in log
    assert node.get("healthy").body == b"v"


@rule("7.8")
def test_a_range_that_meets_a_damaged_record_is_cut_not_finished(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1)[0]
    for key in ("a1", "a3"):
        assert node.put(key, b"v").status == 201
    damage(node, b"a2")
    answer = node.range_chunks("a")
    assert answer.status == 200
    with pytest.raises(ValueError, match=r"cut short|no chunk-size line"):
        answer.chunks  # noqa: B018 (a cut range must not parse as a whole one)
    assert "range failed mid-stream" in node.log_tail(200)
    assert node.get("a1").body == b"v"
