"""Read repair against the membership changing under it, with the real Peers."""

from __future__ import annotations

import logging
from pathlib import Path

from dht.config import NodeConfig
from dht.coordination.read_repair import Repairer
from dht.coordination.tally import Counters
from dht.model.clock import version_at
from dht.model.log_limits import RateLimitedLog
from dht.model.record import Record
from dht.transport.peers import Peers
from dht.transport.replica import Replicas, SelfReplica

SELF = "http://127.0.0.1:1"
LEAVING = "http://127.0.0.1:2"


async def test_a_late_answer_from_a_replica_a_step_retired_repairs_nothing(
    tmp_path: Path,
) -> None:
    """A GET's late answer can come from a replica that the final step of a membership
    change has removed (and `Peers` retired) since the GET went out. It is no longer a
    replica of anything: read repair skips it, rather than failing with KeyError in the
    tally's callback (found by the simulator, with grow and shrink faults)."""
    config = NodeConfig(port=1, data_dir=tmp_path, cluster=(SELF, LEAVING), self_url=SELF)
    peers = Peers(config, [SELF, LEAVING], "ring")
    await peers.retire(keep=[SELF])
    counters = Counters()
    here = SelfReplica(SELF, None)  # type: ignore[arg-type]
    repairer = Repairer(Replicas(here, peers), counters, RateLimitedLog(logging.getLogger()))
    repairer.repair(LEAVING, b"key", Record.live(version_at(1_000), b"value"))
    assert counters.read_repairs == 0
    await peers.close()
