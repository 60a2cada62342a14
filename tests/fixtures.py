"""Fixtures that start real node processes (see tests/launcher.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dht.testbed import Testbed, free_ports, ports_needed
from tests.launcher import Cluster, Node

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
        root = tmp_path / f"chaos-{len(started)}"
        root.mkdir()
        # One draw for every port, so a proxy cannot take a node's port or another's.
        ports = free_ports(size + ports_needed(size))
        cluster = Cluster(root, size, extra_args, ports[:size])
        testbed = Testbed(cluster.urls, root / "toxiproxy.log", ports[size:]).start()
        started.append((cluster, testbed))
        for index, node in enumerate(cluster):
            node.extra_args += testbed.route_args(index)
        return cluster.start(), testbed

    yield start
    for cluster, testbed in started:
        cluster.stop()
        testbed.stop()
