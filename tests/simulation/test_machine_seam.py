"""The simulated nodes read time and randomness only through the `Machine` they are
given (STYLE.md, seams by construction): while a seed runs, no dht module calls the
`time` module's clocks or `os.urandom`, nor the system's machine (`SYSTEM`, the default
a part falls back to when its maker forgets to pass one)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dht.model.machine import SYSTEM
from dht.simulation.faults import KINDS, MEMBERSHIP_KINDS
from dht.simulation.run import Settings, simulate

TIME_FUNCTIONS = ("monotonic", "monotonic_ns", "perf_counter", "time", "time_ns")
MACHINE_FIELDS = ("monotonic", "monotonic_ns", "wall", "wall_ns", "random_bytes")
# The simulator's own measure of how long a run took on the real clock.
MEASURES_ITSELF = "dht.simulation.run"


def _spy(name: str, real: Callable[..., Any], calls: set[str]) -> Callable[..., Any]:
    def spy(*args: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        if caller.startswith("dht.") and caller != MEASURES_ITSELF:
            calls.add(f"{caller} called {name}")
        return real(*args)

    return spy


@pytest.fixture
def system_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    calls: set[str] = set()
    for name in TIME_FUNCTIONS:
        monkeypatch.setattr(time, name, _spy(f"time.{name}", getattr(time, name), calls))
    monkeypatch.setattr(os, "urandom", _spy("os.urandom", os.urandom, calls))
    saved = {name: getattr(SYSTEM, name) for name in MACHINE_FIELDS}
    for name, real in saved.items():
        object.__setattr__(SYSTEM, name, _spy(f"SYSTEM.{name}", real, calls))
    try:
        yield calls
    finally:
        for name, real in saved.items():
            object.__setattr__(SYSTEM, name, real)


def test_a_simulated_cluster_reads_no_clock_and_no_randomness_but_its_machines(
    system_reads: set[str],
) -> None:
    # Every kind of fault, membership changes too: the driver, the handoff, the fence.
    settings = Settings(seed=286, seconds=60, fault_kinds=KINDS + MEMBERSHIP_KINDS)
    result = simulate(settings)
    assert any("shrink: through" in line for line in result.faults)
    assert result.operations > 200
    assert not system_reads, sorted(system_reads)
