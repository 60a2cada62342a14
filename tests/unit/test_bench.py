"""The benchmark's pure parts: the send schedule, the verdict, the search, the table."""

from __future__ import annotations

import random

import pytest

from bench.constant_rate import Result, Workload, percentile_table, send_offsets
from bench.scenarios import highest_sustained, sustains


def measured(rate: float, latencies_ms: list[float], errors: int = 0) -> Result:
    result = Result(rate, duration=1.0, elapsed=1.0)
    for latency in latencies_ms:
        result.histogram.record_value(int(latency * 1000))
        result.statuses[201] += 1
    if errors:
        result.statuses[504] += errors
    return result


def test_send_offsets_follow_the_rate_for_the_duration() -> None:
    offsets = list(send_offsets(rate=4, duration=2))
    assert offsets == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]


def test_send_offsets_refuse_a_non_positive_rate() -> None:
    with pytest.raises(ValueError):
        next(send_offsets(rate=0, duration=1))


def test_a_rate_is_sustained_only_under_the_bound_without_errors_at_full_rate() -> None:
    assert sustains(measured(100, [5.0] * 100))
    assert not sustains(measured(100, [5.0] * 98 + [80.0] * 2))  # p99 over 50 ms
    assert not sustains(measured(100, [5.0] * 99, errors=1))
    assert not sustains(measured(100, [5.0] * 50))  # sent half the rate


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


def test_percentile_table_lists_wrk2_percentiles_and_counts() -> None:
    table = percentile_table(measured(10, [1.0] * 9 + [1500.0]))
    for line in ("50.000%", "99.000%", "99.990%", "100.000%"):
        assert line in table
    assert "1.50s" in table
    assert "answers by status: 201: 10\n" in table
    assert "504" not in table


def test_workload_requests_carry_replicas_and_read_the_filled_key_space() -> None:
    rng = random.Random(0)
    put = Workload("put", keys=10, replicas="2/3").request(7, rng)
    assert put == ("PUT", "/v0/entity?id=key0000000007&replicas=2/3", b"v" * 100)
    method, path, body = Workload("get", keys=10).request(0, rng)
    assert (method, body) == ("GET", None)
    assert int(path.removeprefix("/v0/entity?id=key")) < 10
