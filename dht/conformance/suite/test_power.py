"""SPEC.md section 17: power loss on a 3-node cluster at the default `replicas`. Each
node's folder is a mount of the power-loss filesystem (dht/testbed/power_loss.py): a
node's power cut is `kill -9` and then the drop of all it wrote and did not fsync. The
nodes know nothing of it. Each scenario is recorded and judged by its history, as
section 14's are (dht/conformance/faults.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from dht.conformance.faults import CLIENT_TIMEOUT, Recorder, seconds
from dht.conformance.fixtures import PoweredClusterFactory
from dht.conformance.launcher import Node
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, key_space
from dht.testbed.power_loss import PowerLossMount

pytestmark = pytest.mark.power

KEYS = key_space(16)
CLIENTS = 4
MIX = Mix(put=0.5, delete=0.1, expiring=0.0)
# Said with a failure of rule 17.2: what such a failure means.
ACKED_BEFORE_FSYNC = (
    "a store that acknowledges a write before it is fsynced loses it when every replica "
    "loses power at once"
)


def cut_power(victims: Sequence[Node], mounts: Sequence[PowerLossMount]) -> str:
    """kill -9 every victim, then drop what each had not fsynced; says how much went."""
    for victim in victims:
        victim.kill()
    dropped = [mounted.power_cut() for mounted in mounts]
    return (
        f"{sum(d.bytes for d in dropped):,} bytes in {sum(d.files for d in dropped)} files "
        "not fsynced were lost"
    )


def power_cut_scenario(
    start_powered_cluster: PoweredClusterFactory, scenario: str, victims: Sequence[int]
) -> tuple[str, str]:
    """Clients through every node; the power of `victims` cut at once, each restarted on
    what its disk kept; the history judged. Returns (what the history shows wrong, or
    '', what the cut dropped)."""
    cluster, mounts = start_powered_cluster(3)
    recorder = Recorder(scenario, cluster.nodes)
    seed = sum(map(ord, scenario))
    clients = Clients(cluster.nodes, KEYS, CLIENTS, seed, timeout=CLIENT_TIMEOUT, mix=MIX)
    clients.start()
    time.sleep(seconds(8.0, 3.0))
    names = ", ".join(recorder.name(cluster[index]) for index in victims)
    with recorder.fault(f"power cut {names}, restart"):
        dropped = cut_power([cluster[i] for i in victims], [mounts[i] for i in victims])
        time.sleep(seconds(3.0, 1.0))
        for index in victims:
            cluster[index].start(wait=False)
        for index in victims:
            cluster[index].wait_ready()
    time.sleep(seconds(4.0, 1.0))
    recorder.add(clients.stop())
    judged, _ = recorder.finish(cluster.nodes)
    assert judged.fates, "no write was acknowledged: nothing to check"
    return judged.failure(), dropped


@rule("17.1")
def test_no_acknowledged_write_is_lost_when_one_node_loses_power(
    start_powered_cluster: PoweredClusterFactory,
) -> None:
    found, dropped = power_cut_scenario(start_powered_cluster, "power-one", [2])
    assert not found, f"after one node's power cut ({dropped}): {found}"


@rule("17.2")
def test_no_acknowledged_write_is_lost_when_every_node_loses_power_at_once(
    start_powered_cluster: PoweredClusterFactory,
) -> None:
    found, dropped = power_cut_scenario(start_powered_cluster, "power-all", [0, 1, 2])
    assert not found, f"after every node's power cut ({dropped}; {ACKED_BEFORE_FSYNC}): {found}"
