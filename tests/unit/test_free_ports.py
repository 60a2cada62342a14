"""Choosing ports for processes that will bind them later (dht/testbed/toxiproxy.py)."""

from __future__ import annotations

from collections.abc import Iterator
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
    assert toxiproxy.free_ports(3, avoid=[41000, 41002]) == [41001, 41003, 41004]


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = toxiproxy.free_ports(10)
    assert len(set(ports)) == 10
