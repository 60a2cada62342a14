"""The repository's own fixtures on top of the kit's (dht/conformance/fixtures.py): a
cluster whose every link crosses Toxiproxy, a folder that a power cut can hit, and the
wheels that dht's installs are made from."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dht.conformance.launcher import Cluster
from dht.conformance.running_cluster import wait_connected
from dht.testbed.power_loss import PowerLossMount, mount, power_loss_unavailable
from dht.testbed.toxiproxy import Testbed
from tests.launcher import chaos_cluster
from tests.wheelhouse import Wheelhouse, shared_wheelhouse

ChaosClusterFactory = Callable[..., tuple[Cluster, Testbed]]


# The xdist_group of the image's tests (tests/deploy): one worker builds it, once.
IMAGE_GROUP = "image"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The image's tests first (`make test` runs them with DHT_IMAGE_TESTS=1): the worker
    that takes them builds the image, minutes mostly spent waiting on downloads and dpkg,
    while the other workers run the rest of the suite, rather than at the end of it."""
    items.sort(key=lambda item: not _in_group(item, IMAGE_GROUP))


def _in_group(item: pytest.Item, group: str) -> bool:
    marker = item.get_closest_marker("xdist_group")
    return marker is not None and group in (*marker.args, marker.kwargs.get("name"))


@pytest.fixture
def start_chaos_cluster(tmp_path: Path) -> Iterator[ChaosClusterFactory]:
    """start_chaos_cluster(size, extra_args=None) -> (Cluster, Testbed): nodes whose every
    link to a peer crosses a real Toxiproxy proxy, each coordinating with every other
    (its channels dialled) before the test begins; all stopped at teardown."""
    started: list[tuple[Cluster, Testbed]] = []

    def start(size: int, extra_args: list[str] | None = None) -> tuple[Cluster, Testbed]:
        cluster, testbed = chaos_cluster(tmp_path / f"chaos-{len(started)}", size, extra_args)
        started.append((cluster, testbed))
        cluster.start()
        # Serving is not yet coordinating: a first write would dial its peers through
        # the proxies, which on a busy machine can take longer than the scenarios'
        # 0.3 s deadline (a 504 in CI on four workers).
        wait_connected(cluster.nodes)
        return cluster, testbed

    yield start
    for cluster, testbed in started:
        cluster.stop()
        testbed.stop()


@pytest.fixture
def lazy_mount(tmp_path: Path) -> Iterator[PowerLossMount]:
    """The lazy filesystem (dht/testbed/power_loss.py) serving tmp_path/backing at
    tmp_path/mount: `power_cut()` drops whatever was not fsynced under it. Skipped, never
    failed, with the reason where it cannot be mounted (not root, no FUSE); always
    unmounted, after what the test started on it has stopped."""
    reason = power_loss_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with mount(tmp_path / "backing", tmp_path / "mount") as mounted:
        yield mounted


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Wheelhouse:
    """The wheel this clone builds and every wheel its installs pull in, fetched once per
    run (tests/wheelhouse.py): `wheelhouse.install(folder, "kit")` is a fresh venv. The
    workers of a run share it, in the folder above their own (pytest's pytest-N)."""
    folder = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        folder = folder.parent
    return shared_wheelhouse(folder / "wheelhouse")
