"""Choosing ports for processes that will bind them later (dht/testbed/toxiproxy.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dht.testbed import toxiproxy, workers


@pytest.fixture(autouse=True)
def one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests choose as a lone run does, whichever xdist worker runs them."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)


def as_worker(monkeypatch: pytest.MonkeyPatch, index: int, count: int) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))


class FakeSocket:
    """A socket whose bind(0) gets the next port of a fixed sequence."""

    ports: Iterator[int] = iter(())

    def __enter__(self) -> FakeSocket:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def bind(self, address: tuple[str, int]) -> None:
        self.port = next(FakeSocket.ports)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_ports_promised_to_others_are_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may offer a node's port before the node binds it: `cluster --chaos`
    starts Toxiproxy first, and a link listening there would take the node's port."""
    FakeSocket.ports = iter([41000, 41001, 41002, 41003, 41004])
    monkeypatch.setattr(toxiproxy.socket, "socket", FakeSocket)
    monkeypatch.setattr(toxiproxy, "listen_ports", lambda: range(0))  # the kernel's choice
    assert toxiproxy.free_ports(3, avoid=[41000, 41002]) == [41001, 41003, 41004]


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = toxiproxy.free_ports(10)
    assert len(set(ports)) == 10


def test_ports_are_drawn_below_the_kernels_ephemeral_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port in the ephemeral range can be taken as a connection's own end before its
    node binds it ("address already in use" in CI runs); below it, no connect() can."""
    ephemeral = tmp_path / "ip_local_port_range"
    ephemeral.write_text("40000\t60999\n")
    monkeypatch.setattr(toxiproxy, "EPHEMERAL_RANGE", ephemeral)
    assert toxiproxy.listen_ports() == range(28000, 40000)
    avoid = list(range(28000, 28100))
    ports = toxiproxy.free_ports(20, avoid=avoid)
    assert len(set(ports)) == 20
    assert all(28100 <= port < 40000 for port in ports), ports
    ephemeral.write_text("not a range")
    assert toxiproxy.listen_ports() == range(0)


def test_workers_running_at_once_choose_from_shares_that_never_meet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make test` runs the suite on several xdist workers: two test beds started at once
    by two workers could draw the same port between choosing it and binding it."""
    ephemeral = tmp_path / "ip_local_port_range"
    ephemeral.write_text("40000\t60999\n")
    monkeypatch.setattr(toxiproxy, "EPHEMERAL_RANGE", ephemeral)
    shares = []
    for index in range(3):
        as_worker(monkeypatch, index, 3)
        shares.append(set(toxiproxy.listen_ports()))
        assert set(toxiproxy.free_ports(20)) <= shares[-1]
    assert set().union(*shares) == set(range(28000, 40000))
    assert sum(len(share) for share in shares) == 12000


def test_the_kernels_choice_is_kept_only_inside_the_workers_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Blocks of 16: 40992-41007 is worker 0's of 2, 41008-41023 worker 1's, and so on.
    FakeSocket.ports = iter([41000, 41010, 41020, 41030, 41040, 41050])
    monkeypatch.setattr(toxiproxy.socket, "socket", FakeSocket)
    monkeypatch.setattr(toxiproxy, "listen_ports", lambda: range(0))
    as_worker(monkeypatch, 1, 2)
    assert toxiproxy.free_ports(3) == [41010, 41020, 41040]


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, (0, 1)),
        ({"PYTEST_XDIST_WORKER": "gw2", "PYTEST_XDIST_WORKER_COUNT": "4"}, (2, 4)),
        ({"PYTEST_XDIST_WORKER": "master", "PYTEST_XDIST_WORKER_COUNT": "4"}, (0, 1)),
        ({"PYTEST_XDIST_WORKER": "gw5", "PYTEST_XDIST_WORKER_COUNT": "4"}, (0, 1)),
        ({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "four"}, (0, 1)),
    ],
)
def test_a_worker_reads_its_share_from_xdists_variables(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], expected: tuple[int, int]
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert workers.share() == expected


def test_the_namespace_test_beds_prefixes_are_shared_out_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    as_worker(monkeypatch, 1, 4)
    assert list(workers.shared_range(0, 256)) == [*range(16, 32), *range(80, 96),
        *range(144, 160), *range(208, 224)]  # fmt: skip
    assert list(workers.shared_range(1020, 1060)) == list(range(1040, 1056))


def test_consecutive_ports_for_a_cluster_command_lie_in_one_block_of_the_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dht cluster --base-port` numbers its nodes' ports from it: a share of single
    ports could give no two consecutive ones."""
    ephemeral = tmp_path / "ip_local_port_range"
    ephemeral.write_text("40000\t60999\n")
    monkeypatch.setattr(toxiproxy, "EPHEMERAL_RANGE", ephemeral)
    as_worker(monkeypatch, 2, 3)
    share = set(toxiproxy.listen_ports())
    for count in (1, 3, 16):
        ports = toxiproxy.consecutive_free_ports(count)
        assert ports == list(range(ports[0], ports[0] + count))
        assert set(ports) <= share and ports[0] % workers.BLOCK == 0
    with pytest.raises(ValueError):
        toxiproxy.consecutive_free_ports(17)
