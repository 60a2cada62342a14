"""The hint store's caps (SPEC.md rule 9.6): past --hint-max-bytes the
oldest hints are dropped first; a hint older than --hint-max-age is dropped, not
delivered. Both drops are counted in /v0/status."""

from __future__ import annotations

import time

from chaos.flags import FAST_FAULTS
from chaos.observe import pending_hints
from dht.conformance.http_client import wait_for
from dht.conformance.rules import rule
from tests.fixtures import ChaosClusterFactory

VALUE = b"x" * 200  # a hint is then about 250 bytes


@rule("9.6")
def test_hints_over_the_size_cap_drop_the_oldest_first(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    cluster, testbed = start_chaos_cluster(3, [*FAST_FAULTS, "--hint-max-bytes", "3000"])
    holder, replica = cluster[0], cluster[2]
    keys = [f"capped-{i:02d}" for i in range(40)]
    testbed.cut(testbed.links_into(2))
    for key in keys:
        assert holder.put(key, VALUE).status == 201
    kept = pending_hints(holder, replica)
    dropped = int(holder.status()["hints_dropped"])
    assert 0 < kept <= 3000 // 250
    assert kept + dropped == len(keys)

    testbed.heal()
    wait_for(lambda: pending_hints(holder, replica), lambda count: count == 0)
    delivered = {key for key in replica.local_records() if key.startswith("capped-")}
    assert len(delivered) == kept
    assert keys[-1] in delivered, "the newest hint was dropped"
    assert keys[0] not in delivered, "the oldest hint survived the cap"
    assert delivered == set(keys[-kept:]), "hints were not dropped oldest first"


@rule("9.6")
def test_hints_older_than_the_age_cap_are_dropped_not_delivered(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    max_age = 0.5
    cluster, testbed = start_chaos_cluster(3, [*FAST_FAULTS, "--hint-max-age", str(max_age)])
    holder, replica = cluster[0], cluster[2]
    keys = [f"aged-{i}" for i in range(5)]
    testbed.cut(testbed.links_into(2))
    for key in keys:
        assert holder.put(key, VALUE).status == 201
    assert pending_hints(holder, replica) == len(keys)
    time.sleep(max_age + 0.2)  # let the hints pass their age limit while the target is away

    testbed.heal()
    wait_for(lambda: pending_hints(holder, replica), lambda count: count == 0)
    assert int(holder.status()["hints_dropped"]) == len(keys)
    assert int(holder.status()["hints_delivered"]) == 0
    assert not any(key.startswith("aged-") for key in replica.local_records())


@rule("9.6", "9.10")
def test_hints_are_dropped_at_half_the_tombstone_grace(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    """Issue 24, finding 4: `--hint-max-age` (3 h by default) was not held to
    `--tombstone-grace`, so a hint could land after every node had collected the
    tombstone that replaced its record, and bring the record back."""
    grace = 1.0
    cluster, testbed = start_chaos_cluster(
        3, [*FAST_FAULTS, "--tombstone-grace", str(grace), "--anti-entropy-interval", "0"]
    )
    holder, replica = cluster[0], cluster[2]
    keys = [f"past-half-grace-{i}" for i in range(5)]
    testbed.cut(testbed.links_into(2))
    for key in keys:
        assert holder.put(key, VALUE).status == 201
    assert pending_hints(holder, replica) == len(keys)
    time.sleep(grace / 2 + 0.2)  # the hints pass half the grace while the target is away

    testbed.heal()
    wait_for(lambda: pending_hints(holder, replica), lambda count: count == 0)
    assert int(holder.status()["hints_dropped"]) == len(keys)
    assert not any(key.startswith("past-half-grace-") for key in replica.local_records())
    assert "hints are kept at most 0.5 s, half of --tombstone-grace" in holder.log_tail(100)
