"""The spec tests' pytest plugin: the tiers' markers, and fixtures that start real node
processes (dht/conformance/launcher.py). The kit loads it with `-p`; the repository's
conftest.py loads it for every test there."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dht.conformance.launcher import Cluster, Node
from dht.conformance.plugin import markers_of
from dht.conformance.running_cluster import CONTROLS, RunningCluster, running_cluster, skip_reason
from dht.conformance.spec import TIER_DESCRIPTIONS, TIERS, load_rules
from dht.testbed import fake_clock
from dht.testbed.fake_clock import FakeClock
from dht.testbed.netns import NetnsTestbed, netns_unavailable
from dht.testbed.power_loss import PowerLossMount, mount, power_loss_unavailable
from dht.testbed.toxiproxy import free_ports

ClusterFactory = Callable[..., Cluster]
LinkedClusterFactory = Callable[[int], tuple[Cluster, NetnsTestbed]]
PoweredClusterFactory = Callable[[int], tuple[Cluster, list[PowerLossMount]]]
ClockedClusterFactory = Callable[..., tuple[Cluster, FakeClock]]


def pytest_configure(config: pytest.Config) -> None:
    for tier, description in TIER_DESCRIPTIONS.items():
        config.addinivalue_line("markers", f"{tier}: {description}")
    config.addinivalue_line("markers", "rule(*numbers): the SPEC.md rules a test checks")
    config.addinivalue_line(
        "markers",
        "alone: cannot share the machine (load at full speed, a rate to hold, a bound of "
        "wall-clock time a busy machine stretches): dht's `make test` runs it after the "
        "others, by itself",
    )
    config.addinivalue_line(
        "markers",
        f"controls(*names): what the test does to node processes ({', '.join(CONTROLS)}); "
        "on a running cluster (--nodes) it needs those commands",
    )
    config.addinivalue_line(
        "markers",
        "lone_node(reason): the test's node must be alone in its cluster; on a running "
        "cluster of more nodes it is skipped with the reason",
    )


@pytest.fixture(scope="session")
def given_cluster() -> Iterator[RunningCluster | None]:
    """The cluster the kit was given with --nodes (DHT_NODES), for the whole run; None
    when the tests start their own nodes."""
    cluster = running_cluster(os.environ)
    yield cluster
    if cluster is not None:
        cluster.restore()


@pytest.fixture
def start_cluster(tmp_path: Path, given_cluster: RunningCluster | None) -> Iterator[ClusterFactory]:
    """start_cluster(size, extra_args=None) -> a started Cluster, stopped at teardown.
    On a running cluster (--nodes): that cluster, if it has `size` nodes and no flags
    are asked for; else the test is skipped, saying why."""
    started: list[Cluster] = []

    def start(size: int, extra_args: list[str] | None = None) -> Cluster:
        if given_cluster is not None:
            return given(given_cluster, size, extra_args)
        cluster = Cluster(tmp_path / f"cluster-{len(started)}", size, extra_args)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in started:
        cluster.stop()


def given(cluster: RunningCluster, size: int, extra_args: list[str] | None) -> Cluster:
    if size != len(cluster):
        pytest.skip(
            f"on a running cluster (--nodes): needs a cluster of {size} node(s) started "
            f"for it; --nodes gives {len(cluster)}"
        )
    if extra_args:
        pytest.skip(
            f"on a running cluster (--nodes): needs its nodes started with {' '.join(extra_args)}"
        )
    return cluster


@pytest.fixture
def node(start_cluster: ClusterFactory, given_cluster: RunningCluster | None) -> Node:
    """A single-node cluster; on a running cluster (--nodes), its first node (a test that
    needs it alone says so with @pytest.mark.lone_node)."""
    if given_cluster is not None:
        return given_cluster[0]
    return start_cluster(1)[0]


def skip_on_running_cluster(items: list[pytest.Item]) -> None:
    """On a running cluster (--nodes), marks skipped, with the reason, each test that
    needs what only the kit's own start of nodes gives, or a control not given."""
    cluster = running_cluster(os.environ)
    if cluster is None:
        return
    for item in items:
        tiers, _ = markers_of(item)
        used = [name for marker in item.iter_markers("controls") for name in marker.args]
        lone = item.get_closest_marker("lone_node")
        reason = skip_reason(
            tiers[0] if tiers else None,
            getattr(item, "fixturenames", ()),
            used,
            str(lone.args[0]) if lone is not None else None,
            cluster.controls,
            len(cluster),
        )
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def leaves_the_cluster_as_found(given_cluster: RunningCluster | None) -> Iterator[None]:
    """On a running cluster: keys of the test's own, and every node serving again after
    it (resumed, started). The suite uses it for every test."""
    if given_cluster is None:
        yield
        return
    given_cluster.begin_test()
    yield
    given_cluster.restore()


@pytest.fixture
def start_linked_cluster(tmp_path: Path) -> Iterator[LinkedClusterFactory]:
    """start_linked_cluster(size) -> (Cluster, NetnsTestbed): each node in a network
    namespace of its own, where its peers' URLs lead through a Toxiproxy proxy per
    directed link, so that links can be faulted on nodes that know nothing of proxies.
    Skips, saying why, where namespaces cannot be made (not root, not Linux, ...)."""
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(f"link faults need each node in a network namespace: {reason}")
    started: list[tuple[Cluster, NetnsTestbed]] = []

    def start(size: int) -> tuple[Cluster, NetnsTestbed]:
        root = tmp_path / f"linked-{len(started)}"
        ports = free_ports(size)
        testbed = NetnsTestbed(ports, log_dir=root)
        cluster = Cluster(root, size, ports=ports)
        started.append((cluster, testbed))
        testbed.start()
        for index, member in enumerate(cluster):
            member.prefix = testbed.command_prefix(index)
        return cluster.start(), testbed

    yield start
    for cluster, testbed in started:
        cluster.stop()
        testbed.stop()


@pytest.fixture
def start_powered_cluster(tmp_path: Path) -> Iterator[PoweredClusterFactory]:
    """start_powered_cluster(size) -> (Cluster, mounts): each node's data folder is a
    mount of the power-loss filesystem (dht/testbed/power_loss.py), `mounts[i]` node i's,
    whose `power_cut()` drops what node i wrote and did not fsync. Skips, saying why,
    where it cannot be mounted (not root, no FUSE). Nodes stop before their mounts go."""
    reason = power_loss_unavailable()
    if reason is not None:
        pytest.skip(f"power loss needs each node's folder on the lazy filesystem: {reason}")
    started: list[tuple[Cluster, list[PowerLossMount]]] = []

    def start(size: int) -> tuple[Cluster, list[PowerLossMount]]:
        root = tmp_path / f"powered-{len(started)}"
        cluster = Cluster(root, size)
        mounts: list[PowerLossMount] = []
        started.append((cluster, mounts))
        for index, node in enumerate(cluster):
            # The node's folder is the mount itself; its log, beside it, is not on it.
            log = root / f"filesystem-{index}.log"
            mounts.append(mount(root / f"backing-{index}", node.data_dir, log))
        return cluster.start(), mounts

    yield start
    for cluster, mounts in started:
        cluster.stop()
        for mounted in mounts:
            mounted.unmount()


@pytest.fixture
def start_clocked_cluster(tmp_path: Path) -> Iterator[ClockedClusterFactory]:
    """start_clocked_cluster(size, offsets=None) -> (Cluster, FakeClock): every node's
    wall clock under a fake clock the test sets from outside (`FakeClock.set_offset`),
    at `offsets` (seconds per node) from the start. Skips, saying why, where the fake
    clock cannot be used on this machine or does not reach a node's processes (a Go or
    static binary)."""
    reason = fake_clock.unavailable()
    if reason is not None:
        pytest.skip(f"clock faults need a fake clock: {reason}")
    started: list[Cluster] = []

    def start(size: int, offsets: list[float] | None = None) -> tuple[Cluster, FakeClock]:
        root = tmp_path / f"clocked-{len(started)}"
        clock = FakeClock(root / "clocks", size)
        cluster = Cluster(root, size)
        started.append(cluster)
        for index, member in enumerate(cluster):
            member.env = clock.environment(index)
            clock.set_offset(index, (offsets or [0.0] * size)[index])
        cluster.start()
        for index, member in enumerate(cluster):
            assert member.process is not None
            if (why := fake_clock.reach(member.process.pid)) is not None:
                pytest.skip(f"the fake clock does not reach node {index + 1}: {why}")
        return cluster, clock

    yield start
    for cluster in started:
        cluster.stop()
        for member in cluster:
            if member.process is not None:
                fake_clock.release(member.process.pid)


def problems_of(item: pytest.Item, rules: dict[str, str]) -> list[str]:
    """What is wrong with a spec test's markers; `rules` maps each rule number to its tier."""
    tiers, numbers = markers_of(item)
    problems = []
    if len(tiers) != 1:
        problems.append(f"has tiers {tiers or 'none'}; it needs exactly one of {TIERS}")
    if not numbers:
        problems.append("names no rule; add @rule(...) from dht/conformance/rules.py")
    for marker in item.iter_markers("controls"):
        for name in marker.args:
            if name not in CONTROLS:
                problems.append(f"uses control {name!r}; the controls are {CONTROLS}")
    for number in numbers:
        if number not in rules:
            problems.append(f"names rule {number}, which SPEC.md does not have")
        elif tiers and tiers[0] != "dht" and rules[number] != tiers[0]:
            problems.append(f"is in tier {tiers[0]} but names rule {number} of {rules[number]}")
    return problems


def refuse_unmarked(items: list[pytest.Item], folder: Path) -> None:
    """Every spec test in `folder` belongs to exactly one tier and names the SPEC.md
    rules it checks; collection stops with the list of offenders otherwise, so the
    conformance report can always point a failure at a numbered paragraph."""
    rules = {number: rule.tier for number, rule in load_rules().items()}
    offenders = [
        f"{item.nodeid} {problem}"
        for item in items
        if folder in item.path.parents
        for problem in problems_of(item, rules)
    ]
    if offenders:
        raise pytest.UsageError(
            "spec tests without a proper tier or rule:\n" + "\n".join(offenders)
        )
