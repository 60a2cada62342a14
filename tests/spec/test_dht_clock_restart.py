"""SPEC.md rules 8.3 and 8.7: a node's clock never goes back across a restart, so a write
acknowledged after the restart is newer than every write acknowledged before it.

Before rule 8.7 the hybrid clock started at 0 on every start: once a peer's clock ahead
(within the drift bound) had carried it forward, or once its own wall clock stepped
back, a restarted coordinator issued versions older than writes it had acknowledged
itself, and its new acknowledged writes lost to them.
"""

from __future__ import annotations

from collections.abc import Callable

import plyvel
import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect
from dht.conformance.launcher import Node
from dht.conformance.rules import rule
from dht.storage.store import CLOCK_CEILING, DIGESTS_READY

pytestmark = pytest.mark.dht

KEYS = [f"restart-{index}" for index in range(10)]


def write_before_and_after_restart(coordinator: Node, restart: Callable[[], None]) -> list[str]:
    """PUT every key at 3/3 as `before`, restart the coordinator, PUT it again as
    `after`; returns the keys a 3/3 read does not answer `after` for."""
    for key in KEYS:
        expect(coordinator.put(key, b"before", "3/3"), 201, context=key)
    restart()
    for key in KEYS:
        expect(coordinator.put(key, b"after", "3/3"), 201, context=key)
    return [key for key in KEYS if coordinator.get(key, "3/3").body != b"after"]


def carried_forward(start_cluster: ClusterFactory) -> Node:
    """Three nodes, the second 30 s ahead (inside the 60 s bound): writes of every key
    through it carry every replica's clock 30 s forward. Returns the first node."""
    cluster = start_cluster(3)
    cluster[1].stop()
    cluster[1].extra_args += ["--clock-skew", "30"]
    cluster[1].start()
    for key in KEYS:
        expect(cluster[1].put(key, b"from the clock ahead", "3/3"), 201, context=key)
    return cluster[0]


@rule("8.3", "8.7")
def test_a_write_after_a_crash_is_newer_than_one_a_clock_ahead_carried_forward(
    start_cluster: ClusterFactory,
) -> None:
    """The issue's reproduction: a peer 30 s ahead (inside the 60 s bound) carries the
    coordinator's clock forward; the coordinator is killed (no clean stop to save
    anything) and started again."""
    coordinator = carried_forward(start_cluster)

    def crash_and_start() -> None:
        coordinator.kill()
        coordinator.start()

    assert write_before_and_after_restart(coordinator, crash_and_start) == []


@rule("8.3", "8.7")
def test_a_write_after_the_wall_clock_stepped_back_across_a_restart_is_newer(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3)
    coordinator = cluster[0]
    coordinator.stop()
    coordinator.extra_args += ["--clock-skew", "20"]
    coordinator.start()

    def step_the_clock_back() -> None:
        coordinator.stop()
        coordinator.extra_args[-2:] = []  # its wall clock is now 20 s behind its past
        coordinator.start()

    assert write_before_and_after_restart(coordinator, step_the_clock_back) == []


@rule("8.3", "8.7")
def test_a_write_after_the_upgrade_to_a_saved_ceiling_is_newer(
    start_cluster: ClusterFactory,
) -> None:
    """Found in review of issue 24: a data folder from before rule 8.7 has no saved
    ceiling, though its records carry versions the clock issued or took; its first start
    began the clock at the wall clock. Now it begins past the newest version stored.
    Simulated by removing the ceiling and putting back the older index marker on the
    stopped node's folder."""
    coordinator = carried_forward(start_cluster)

    def restart_as_on_a_folder_from_before() -> None:
        coordinator.stop()
        db = plyvel.DB(str(coordinator.data_dir / "leveldb"))
        try:
            db.delete(CLOCK_CEILING, sync=True)
            db.delete(DIGESTS_READY, sync=True)
            db.put(b"m:digests-1", b"1", sync=True)
        finally:
            db.close()
        coordinator.start()

    assert write_before_and_after_restart(coordinator, restart_as_on_a_folder_from_before) == []
