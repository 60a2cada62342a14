"""What one constant-rate run measured, and wrk2's table of it (pure; no I/O).

Latencies are microseconds in an HdrHistogram (1 µs to 5 minutes, 3 significant digits),
each taken from the request's intended send time (see bench.constant_rate). `lag` holds
how late the generator itself sent each request: high lag with low server latency means
the generator, not the server, was short of CPU.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

PERCENTILES = (50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 100.0)
LOWEST_US, HIGHEST_US, DIGITS = 1, 300_000_000, 3
# A GET of a key that is not there answers 404: a miss, not a failure of the server.
NOT_AN_ERROR = frozenset({404})


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)


def microseconds(seconds: float) -> int:
    """`seconds` as a value the histogram takes (clamped to its range)."""
    return max(0, min(round(seconds * 1_000_000), HIGHEST_US))


@dataclass
class Result:
    """Counts and latencies of one run at `rate` requests/s for `duration` seconds.
    `elapsed` runs from the start to the last answer (or give-up)."""

    rate: float
    duration: float
    histogram: HdrHistogram = field(default_factory=new_histogram)
    lag: HdrHistogram = field(default_factory=new_histogram)
    statuses: Counter[int] = field(default_factory=Counter)
    timeouts: int = 0
    connection_errors: int = 0
    unsent: int = 0
    elapsed: float = 0.0

    def record(self, status: int, latency: float) -> None:
        """An answer with `status`, `latency` seconds after it was due."""
        self.statuses[status] += 1
        self.histogram.record_value(microseconds(latency))

    def record_lag(self, seconds: float) -> None:
        """The generator sent a request `seconds` after it was due (0 if on time)."""
        self.lag.record_value(microseconds(max(seconds, 0.0)))

    @property
    def answered(self) -> int:
        return sum(self.statuses.values())

    @property
    def sent(self) -> int:
        return self.answered + self.timeouts + self.connection_errors

    @property
    def achieved_rate(self) -> float:
        """Answers per second, over the duration or, if the last answer came later, until
        it came: a server that falls behind shows a rate under the target."""
        window = max(self.duration, self.elapsed)
        return self.answered / window if window > 0 else 0.0

    @property
    def error_statuses(self) -> dict[int, int]:
        return {code: n for code, n in sorted(self.statuses.items()) if code >= 400}

    @property
    def errors(self) -> int:
        """Failed requests: error statuses (not 404), time-outs, connection errors, and
        requests never sent because the run hit its time bound."""
        failed = sum(n for code, n in self.error_statuses.items() if code not in NOT_AN_ERROR)
        return failed + self.timeouts + self.connection_errors + self.unsent

    def percentile_ms(self, percentile: float) -> float:
        return _ms(self.histogram, percentile)


def _ms(histogram: HdrHistogram, percentile: float) -> float:
    return float(histogram.get_value_at_percentile(percentile)) / 1000.0


def format_latency(milliseconds: float) -> str:
    """wrk2's units: µs under a millisecond, ms under a second, then seconds."""
    if milliseconds >= 1000:
        return f"{milliseconds / 1000:8.2f}s"
    if milliseconds < 1:
        return f"{milliseconds * 1000:8.2f}us"
    return f"{milliseconds:8.2f}ms"


def percentile_table(result: Result) -> str:
    """wrk2's latency distribution table, then the rate, answers and errors."""
    lines = ["  Latency Distribution (HdrHistogram - Recorded Latency)"]
    if result.answered:
        for percentile in PERCENTILES:
            lines.append(f"{percentile:7.3f}%{format_latency(result.percentile_ms(percentile))}")
    else:
        lines.append("  (no answers)")
    answers = ", ".join(f"{code}: {n}" for code, n in sorted(result.statuses.items()))
    errors = ", ".join(f"{code}: {n}" for code, n in result.error_statuses.items())
    lag = ", ".join(
        f"{name} {format_latency(_ms(result.lag, percentile)).strip()}"
        for name, percentile in (("p50", 50.0), ("p99", 99.0), ("max", 100.0))
    )
    lines += [
        "",
        f"  {result.sent} requests in {max(result.duration, result.elapsed):.2f}s: "
        f"target {result.rate:,.0f}/s, achieved {result.achieved_rate:,.1f}/s",
        f"  answers by status: {answers or 'none'}",
        f"  errors by status: {errors or 'none'}",
        f"  time-outs: {result.timeouts}, connection errors: {result.connection_errors}, "
        f"not sent (time bound): {result.unsent}",
        f"  sent behind schedule: {lag if result.lag.get_total_count() else 'nothing sent'}",
    ]
    return "\n".join(lines)
