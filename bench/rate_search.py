"""The search for the highest constant rate a server sustains (pure): the verdict on one
rate (p99 under the bound, nothing failed, vegeta kept pace, the answers kept up), the
doubling-then-bisecting search, and what bounded it. Used by bench.scenarios."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench.vegeta import Report

P99_BOUND_MS = 50.0
START_RATE = 250.0


def sustains(result: Report, bound_ms: float = P99_BOUND_MS) -> bool:
    """A rate is sustained when p99 is under the bound, every request was answered with
    2xx/3xx, vegeta really sent at that rate and the answers kept up with it."""
    return (
        result.percentile_ms("p99") < bound_ms
        and result.failures == 0
        and result.kept_pace
        and result.throughput >= 0.95 * result.rate
    )


def highest_sustained(
    measure: Callable[[float], Report], start: float, limit: float, refinements: int = 3
) -> Report | None:
    """Doubles the rate from `start` until it is not sustained (or passes `limit`), then
    bisects between the last good and the first bad rate `refinements` times. Returns
    the measurement at the highest sustained rate, or None if even `start` was not."""
    best: Report | None = None
    rate, failed_at = start, None
    while rate <= limit:
        result = measure(rate)
        if not sustains(result):
            failed_at = rate
            break
        best = result
        rate *= 2
    if best is None or failed_at is None:
        return best
    low, high = best.rate, failed_at
    for _ in range(refinements):
        middle = (low + high) / 2
        result = measure(middle)
        if sustains(result):
            best, low = result, middle
        else:
            high = middle
    return best


@dataclass
class Search:
    """Every step of one scenario's search, and the highest sustained one."""

    steps: list[Report] = field(default_factory=list)
    best: Report | None = None

    @property
    def first_failure(self) -> Report | None:
        """The lowest rate that was not sustained: what bounded the search."""
        failed = [step for step in self.steps if not sustains(step)]
        return min(failed, key=lambda step: step.rate, default=None)


def bound_by(search: Search) -> str:
    """What stopped a search: "generator" if vegeta could not send at the first rate
    that failed, "server" if it could (so the server's latency or errors did), or
    "--max-rate" if no rate failed."""
    failure = search.first_failure
    if failure is None:
        return "--max-rate"
    return "server" if failure.kept_pace else "generator"


def why_over(result: Report) -> str:
    """Why one step was not sustained, in the report's words."""
    reasons = []
    if result.percentile_ms("p99") >= P99_BOUND_MS:
        reasons.append(f"p99 {result.percentile_ms('p99'):.0f} ms")
    if result.failures:
        reasons.append(f"{result.failures} failed")
    if not result.kept_pace:
        reasons.append("vegeta fell behind")
    if result.throughput < 0.95 * result.rate:
        reasons.append(f"answered {result.throughput:,.0f}/s")
    return ", ".join(reasons)
