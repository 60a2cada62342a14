"""Reading wrk's output (bench.wrk); wrk itself is not needed."""

from __future__ import annotations

import pytest

from bench.wrk import duration_ms, parse_wrk

# wrk 4.1 with --latency against the bare server.
CLEAN = """\
Running 1s test @ http://127.0.0.1:18099
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   693.62us  172.48us   3.81ms   84.77%
    Req/Sec    11.56k     0.89k   12.77k    63.64%
  Latency Distribution
     50%  643.00us
     75%  747.00us
     90%    0.91ms
     99%    1.21ms
  12633 requests in 1.10s, 1.34MB read
Requests/sec:  11485.10
Transfer/sec:      1.22MB
"""

# The same shape from an overloaded server: seconds, socket errors, non-2xx answers.
FAILING = """\
Running 8s test @ http://127.0.0.1:8080
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.52s   300.00ms   2.00s    70.00%
    Req/Sec    40.00     10.00    60.00     80.00%
  Latency Distribution
     50%    1.50s
     75%    1.70s
     90%    1.90s
     99%    2.00s
  320 requests in 8.01s, 40.00KB read
  Socket errors: connect 1, read 2, write 3, timeout 40
  Non-2xx or 3xx responses: 7
Requests/sec:     39.95
Transfer/sec:      4.99KB
"""


def test_a_clean_run_gives_rate_latencies_and_no_errors() -> None:
    run = parse_wrk(CLEAN, cpu_share=0.25)
    assert (run.requests, run.seconds, run.rate, run.cpu_share) == (12633, 1.1, 11485.10, 0.25)
    assert run.p50_ms == pytest.approx(0.643) and run.p99_ms == 1.21
    assert run.errors == 0 and not run.generator_bound


def test_socket_errors_and_non_2xx_answers_are_errors() -> None:
    run = parse_wrk(FAILING)
    assert (run.requests, run.seconds, run.rate) == (320, 8.01, 39.95)
    assert (run.p50_ms, run.p99_ms) == (1500.0, 2000.0)
    assert (run.socket_errors, run.non_2xx, run.errors) == (46, 7, 53)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("643.00us", 0.643), ("1.21ms", 1.21), ("2.00s", 2000.0), ("1.50m", 90_000.0)],
)
def test_durations_are_read_in_wrks_units(text: str, ms: float) -> None:
    assert duration_ms(text) == pytest.approx(ms)


def test_an_unknown_unit_is_an_error() -> None:
    with pytest.raises(ValueError):
        duration_ms("3.00d")


def test_output_without_the_latency_table_is_an_error_not_a_zero() -> None:
    without = "\n".join(line for line in CLEAN.splitlines() if "%  " not in line)
    with pytest.raises(ValueError, match="p50"):
        parse_wrk(without)


def test_wrk_busy_on_its_core_most_of_the_time_is_generator_bound() -> None:
    assert parse_wrk(CLEAN, cpu_share=0.95).generator_bound
    assert not parse_wrk(CLEAN, cpu_share=0.5).generator_bound
