"""The scenarios runner's pure parts: the verdict on one rate, and the search for the
highest sustained one (bench.scenarios)."""

from __future__ import annotations

from bench.measurement import Result
from bench.scenarios import highest_sustained, sustains


def measured(rate: float, latencies_ms: list[float], errors: int = 0) -> Result:
    result = Result(rate, duration=1.0, elapsed=1.0)
    for latency in latencies_ms:
        result.record(201, latency / 1000)
    if errors:
        result.statuses[504] += errors
    return result


def test_a_rate_is_sustained_only_under_the_bound_without_errors_at_full_rate() -> None:
    assert sustains(measured(100, [5.0] * 100))
    assert not sustains(measured(100, [5.0] * 98 + [80.0] * 2))  # p99 over 50 ms
    assert not sustains(measured(100, [5.0] * 99, errors=1))
    assert not sustains(measured(100, [5.0] * 50))  # answered half the rate


def test_search_doubles_then_bisects_to_the_highest_sustained_rate() -> None:
    capacity = 3000.0
    tried: list[float] = []

    def measure(rate: float) -> Result:
        tried.append(rate)
        return measured(rate, [5.0 if rate <= capacity else 90.0] * int(rate))

    best = highest_sustained(measure, start=250, limit=64_000, refinements=3)
    assert best is not None
    assert tried[:5] == [250, 500, 1000, 2000, 4000]
    assert best.rate == 3000  # 2000..4000 bisected: 3000 ok, 3500 over, 3250 over


def test_search_gives_none_when_even_the_start_is_not_sustained() -> None:
    assert highest_sustained(lambda rate: measured(rate, [99.0]), start=250, limit=1000) is None
