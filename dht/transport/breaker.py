"""The per-peer circuit breaker: a pure state machine with an injected clock.

closed --(threshold consecutive failures)--> open --(cooldown)--> half-open: exactly one
probe is let through; its success closes the circuit, its failure opens it again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class State(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class Breaker:
    def __init__(self, threshold: int, cooldown: float, clock: Callable[[], float]) -> None:
        if threshold < 1:
            raise ValueError("breaker threshold must be at least 1")
        self._threshold = threshold
        self._cooldown = cooldown
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probe_in_flight = False

    @property
    def state(self) -> State:
        if self._opened_at is None:
            return State.CLOSED
        if self._probe_in_flight or self._clock() - self._opened_at >= self._cooldown:
            return State.HALF_OPEN
        return State.OPEN

    def available(self) -> bool:
        """Whether a request could be let through now (without taking the probe)."""
        state = self.state
        return state is State.CLOSED or (state is State.HALF_OPEN and not self._probe_in_flight)

    def allow(self) -> bool:
        """Asks to send one request; in half-open this takes the single probe slot."""
        state = self.state
        if state is State.CLOSED:
            return True
        if state is State.HALF_OPEN and not self._probe_in_flight:
            self._probe_in_flight = True
            return True
        return False

    def retry_after(self) -> float:
        """Seconds until the cooldown ends: 0 once it has, even while the single probe is
        still deciding (callers round a Retry-After up to at least a second)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self._opened_at + self._cooldown - self._clock())

    def record_success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probe_in_flight = False

    def release_probe(self) -> None:
        """The probe ended with no verdict (cancelled): let another request probe."""
        self._probe_in_flight = False

    def record_failure(self) -> None:
        if self._probe_in_flight:
            self._opened_at = self._clock()
            self._probe_in_flight = False
            return
        if self._opened_at is not None:
            return  # a request sent before the circuit opened; the open period stands
        self._failures += 1
        if self._failures >= self._threshold:
            self._opened_at = self._clock()
