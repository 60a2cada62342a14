"""SPEC.md rule 10.2 under a power cut, not just a crash: a real node whose data folder is
on the power-loss filesystem (dht/testbed/power_loss.py) is killed with SIGKILL, the
power is cut (every write not fsynced is gone), and it starts again on what is left.
The default (`--durability group`: acknowledged once synced, in groups) and `each` keep
every acknowledged write; `none` acknowledges before any fsync, so the last ones are lost.
Skipped with the reason where FUSE cannot be mounted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dht.conformance.http_client import expect
from dht.conformance.launcher import Node
from dht.conformance.rules import rule
from dht.testbed.node_template import NUMERIC_HOST, topology_url
from dht.testbed.power_loss import PowerLossMount
from dht.testbed.toxiproxy import free_ports

pytestmark = pytest.mark.dht

# Which flags keep every acknowledged write through a power cut.
KEPT_THROUGH_A_POWER_CUT = [
    pytest.param([], True, id="default"),
    pytest.param(["--durability", "each"], True, id="each"),
    pytest.param(["--durability", "none"], False, id="none"),
]
# Past LevelDB's 4 MiB write buffer: a table file is written and synced mid-way, and a
# new log begins, so the cut meets both.
WRITES = 2500
VALUE_BYTES = 2048


def node_on(data_dir: Path, flags: list[str]) -> Node:
    """A one-node cluster whose data folder is `data_dir` (its log beside it)."""
    port = free_ports(1)[0]
    url = topology_url(NUMERIC_HOST, port)
    return Node(port, data_dir, url, [url], list(flags))


@rule("10.2")
@pytest.mark.parametrize(("flags", "keeps_every_write"), KEPT_THROUGH_A_POWER_CUT)
def test_acknowledged_writes_after_kill_9_and_a_power_cut(
    lazy_mount: PowerLossMount, flags: list[str], keeps_every_write: bool
) -> None:
    node = node_on(lazy_mount.mountpoint, flags)
    values = {f"cut-{i:05d}": os.urandom(VALUE_BYTES) for i in range(WRITES)}
    try:
        node.start()
        for key, value in values.items():
            expect(node.put(key, value), 201)
        node.kill()
        dropped = lazy_mount.power_cut()
        node.start()
        lost = [key for key, value in values.items() if node.get(key).body != value]
    finally:
        node.stop()
    cut = f"the power cut dropped {dropped.bytes} unsynced bytes of {dropped.files} files"
    if keeps_every_write:
        assert lost == [], f"{len(lost)} of {WRITES} acknowledged writes lost; {cut}"
    else:
        assert lost, f"every acknowledged write survived although {cut}: are they fsynced now?"
