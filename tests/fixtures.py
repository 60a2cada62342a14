"""Fixtures that start real node processes (see tests/launcher.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dht.testbed.toxiproxy import Testbed
from tests.launcher import Cluster, Node, chaos_cluster

ClusterFactory = Callable[..., Cluster]
ChaosClusterFactory = Callable[..., tuple[Cluster, Testbed]]


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[ClusterFactory]:
    """start_cluster(size, extra_args=None) -> a started Cluster, stopped at teardown."""
    started: list[Cluster] = []

    def start(size: int, extra_args: list[str] | None = None) -> Cluster:
        cluster = Cluster(tmp_path / f"cluster-{len(started)}", size, extra_args)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in started:
        cluster.stop()


@pytest.fixture
def node(start_cluster: ClusterFactory) -> Node:
    """A single-node cluster."""
    return start_cluster(1)[0]


@pytest.fixture
def start_chaos_cluster(tmp_path: Path) -> Iterator[ChaosClusterFactory]:
    """start_chaos_cluster(size, extra_args=None) -> (Cluster, Testbed): nodes whose every
    link to a peer crosses a real Toxiproxy proxy; all stopped at teardown."""
    started: list[tuple[Cluster, Testbed]] = []

    def start(size: int, extra_args: list[str] | None = None) -> tuple[Cluster, Testbed]:
        cluster, testbed = chaos_cluster(tmp_path / f"chaos-{len(started)}", size, extra_args)
        started.append((cluster, testbed))
        return cluster.start(), testbed

    yield start
    for cluster, testbed in started:
        cluster.stop()
        testbed.stop()
