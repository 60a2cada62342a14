"""Node flags the convergence scenarios share: short deadlines, a quick breaker and a
quick hint delivery, so that faults and recoveries show up within tenths of a second."""

from __future__ import annotations

FAST_FAULTS = [
    "--timeout",
    "0.3",
    "--breaker-threshold",
    "3",
    "--breaker-cooldown",
    "0.5",
    "--hint-interval",
    "0.2",
]
TIMEOUT = 0.3  # the --timeout above: a replica request's deadline
