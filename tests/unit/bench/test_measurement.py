"""What a constant-rate run measured, and wrk2's table of it (bench.measurement)."""

from __future__ import annotations

import re

import pytest

from bench.measurement import PERCENTILES, Result, format_latency, percentile_table


def measured(latencies_ms: list[float], status: int = 201) -> Result:
    result = Result(rate=len(latencies_ms), duration=1.0, elapsed=1.0)
    for latency in latencies_ms:
        result.record(status, latency / 1000)
        result.record_lag(0.0)
    return result


def test_the_table_lists_wrk2_percentiles_in_order_with_their_latency() -> None:
    table = percentile_table(measured([1.0] * 98 + [20.0, 1500.0]))
    rows = re.findall(r"^\s*([\d.]+)%\s+([\d.]+)(us|ms|s)$", table, re.MULTILINE)
    assert [float(percentile) for percentile, _, _ in rows] == list(PERCENTILES)
    latencies = {float(percentile): (float(value), unit) for percentile, value, unit in rows}
    # HdrHistogram keeps 3 significant digits.
    for percentile, (value, unit) in {
        50.0: (1.0, "ms"),
        99.0: (20.0, "ms"),
        100.0: (1.5, "s"),
    }.items():
        assert latencies[percentile][0] == pytest.approx(value, rel=1e-3)
        assert latencies[percentile][1] == unit


def test_the_table_gives_rate_answers_and_errors_by_status() -> None:
    result = measured([2.0] * 95)
    result.statuses[503] += 3
    result.statuses[404] += 2
    result.timeouts, result.connection_errors, result.unsent = 4, 5, 6
    table = percentile_table(result)
    assert "109 requests in 1.00s: target 95/s, achieved 100.0/s" in table
    assert "answers by status: 201: 95, 404: 2, 503: 3\n" in table
    assert "errors by status: 404: 2, 503: 3\n" in table
    assert "time-outs: 4, connection errors: 5, not sent (time bound): 6" in table


def test_the_table_says_when_nothing_answered() -> None:
    table = percentile_table(Result(rate=10, duration=1.0, elapsed=1.0))
    assert "(no answers)" in table
    assert "answers by status: none" in table


def test_the_table_shows_how_late_the_generator_sent() -> None:
    result = measured([1.0])
    result.record_lag(0.004)
    assert "sent behind schedule: p50 0.00us, p99 4.00ms, max 4.00ms" in percentile_table(result)


def test_latencies_take_wrk2_units() -> None:
    assert format_latency(0.25).strip() == "250.00us"
    assert format_latency(12.5).strip() == "12.50ms"
    assert format_latency(2500).strip() == "2.50s"


def test_achieved_rate_counts_answers_over_the_run_or_until_the_last_answer() -> None:
    on_time = measured([1.0] * 100)
    assert on_time.achieved_rate == 100
    late = measured([1.0] * 100)
    late.elapsed = 2.0  # the last answer came a second after the schedule ended
    assert late.achieved_rate == 50


def test_errors_are_failures_of_the_server_or_the_network_but_not_a_missing_key() -> None:
    result = measured([1.0] * 10)
    result.statuses.update({404: 3, 400: 1, 503: 2, 504: 1})
    result.timeouts, result.connection_errors, result.unsent = 1, 1, 1
    assert result.errors == 1 + 2 + 1 + 3
    assert result.sent == 10 + 7 + 2


def test_latencies_beyond_the_histogram_are_clamped_not_lost() -> None:
    result = measured([0.0, 10_000_000.0])
    assert result.histogram.get_total_count() == 2
