"""Choosing ports for processes that will bind them later (dht/testbed/toxiproxy.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dht.testbed import toxiproxy


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
