"""SPEC.md section 10: writes are in LevelDB's log before they are acknowledged, with
`--sync-writes` as with the default."""

from __future__ import annotations

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect
from dht.conformance.rules import rule

pytestmark = pytest.mark.dht


@rule("10.2")
@pytest.mark.parametrize("flags", [[], ["--sync-writes"]], ids=["default", "sync-writes"])
def test_every_acknowledged_write_is_in_the_log_when_the_process_dies(
    start_cluster: ClusterFactory, flags: list[str]
) -> None:
    node = start_cluster(1, flags)[0]
    values = {f"logged-{i:03d}": f"value {i}".encode() * 50 for i in range(100)}
    for key, value in values.items():
        expect(node.put(key, value), 201)
    node.kill()
    node.start()
    for key, value in values.items():
        expect(node.get(key), 200, value, context=f"{key} after kill -9")
