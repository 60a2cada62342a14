"""The per-peer circuit breaker (SPEC.md rule 9.3), driven by a fake clock."""

from __future__ import annotations

import pytest

from dht.transport.breaker import Breaker, State

THRESHOLD = 3
COOLDOWN = 2.0


class FakeClock:
    """Monotonic seconds that only move when a test moves them."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def breaker(clock: FakeClock) -> Breaker:
    return Breaker(THRESHOLD, COOLDOWN, clock)


def open_circuit(breaker: Breaker) -> None:
    for _ in range(THRESHOLD):
        assert breaker.allow()
        breaker.record_failure()
    assert breaker.state is State.OPEN


def take_probe(breaker: Breaker, clock: FakeClock) -> None:
    open_circuit(breaker)
    clock.advance(COOLDOWN)
    assert breaker.allow()


def test_a_new_breaker_is_closed_and_lets_requests_through(breaker: Breaker) -> None:
    assert breaker.state is State.CLOSED
    assert all(breaker.allow() for _ in range(100))
    assert breaker.available()
    assert breaker.retry_after() == 0.0


@pytest.mark.parametrize("threshold", [0, -1])
def test_a_threshold_below_one_is_rejected(threshold: int, clock: FakeClock) -> None:
    with pytest.raises(ValueError):
        Breaker(threshold, COOLDOWN, clock)


def test_the_circuit_opens_after_threshold_consecutive_failures(breaker: Breaker) -> None:
    for _ in range(THRESHOLD - 1):
        breaker.record_failure()
        assert breaker.state is State.CLOSED
        assert breaker.allow()
    breaker.record_failure()
    assert breaker.state is State.OPEN
    assert not breaker.allow()


def test_a_threshold_of_one_opens_on_the_first_failure(clock: FakeClock) -> None:
    breaker = Breaker(1, COOLDOWN, clock)
    breaker.record_failure()
    assert breaker.state is State.OPEN


def test_a_success_resets_the_failure_count(breaker: Breaker) -> None:
    for _ in range(5):
        for _ in range(THRESHOLD - 1):
            breaker.record_failure()
        breaker.record_success()
    for _ in range(THRESHOLD - 1):
        breaker.record_failure()
    assert breaker.allow()
    breaker.record_failure()
    assert not breaker.allow()


def test_an_open_circuit_refuses_requests_until_the_cooldown_ends(
    breaker: Breaker, clock: FakeClock
) -> None:
    open_circuit(breaker)
    for _ in range(3):
        clock.advance(COOLDOWN / 4)
        assert breaker.state is State.OPEN
        assert not breaker.allow()
        assert not breaker.available()
    clock.advance(COOLDOWN / 4 - 1e-6)
    assert not breaker.allow()
    clock.advance(1e-6)
    assert breaker.state is State.HALF_OPEN


def test_after_the_cooldown_exactly_one_probe_is_let_through(
    breaker: Breaker, clock: FakeClock
) -> None:
    open_circuit(breaker)
    clock.advance(COOLDOWN)
    assert breaker.state is State.HALF_OPEN
    assert breaker.allow()
    assert [breaker.allow() for _ in range(10)] == [False] * 10
    clock.advance(10 * COOLDOWN)  # a slow probe: still the only one
    assert not breaker.allow()
    assert breaker.state is State.HALF_OPEN


def test_a_successful_probe_closes_the_circuit(breaker: Breaker, clock: FakeClock) -> None:
    take_probe(breaker, clock)
    breaker.record_success()
    assert breaker.state is State.CLOSED
    assert breaker.available()
    assert all(breaker.allow() for _ in range(10))
    assert breaker.retry_after() == 0.0
    for _ in range(THRESHOLD - 1):  # the count starts again from zero
        breaker.record_failure()
    assert breaker.state is State.CLOSED


def test_a_failed_probe_reopens_the_circuit_for_a_fresh_cooldown(
    breaker: Breaker, clock: FakeClock
) -> None:
    take_probe(breaker, clock)
    clock.advance(0.7)  # the probe took a while to fail
    breaker.record_failure()
    assert breaker.state is State.OPEN
    assert not breaker.allow()
    assert breaker.retry_after() == pytest.approx(COOLDOWN)
    clock.advance(COOLDOWN - 0.01)
    assert not breaker.allow()
    clock.advance(0.01)
    assert breaker.allow()
    assert not breaker.allow()


def test_releasing_the_probe_lets_another_request_probe(breaker: Breaker, clock: FakeClock) -> None:
    take_probe(breaker, clock)
    assert not breaker.allow()
    breaker.release_probe()
    assert breaker.state is State.HALF_OPEN
    assert breaker.available()
    assert breaker.allow()
    assert not breaker.allow()


def test_retry_after_counts_down_to_zero(breaker: Breaker, clock: FakeClock) -> None:
    open_circuit(breaker)
    assert breaker.retry_after() == pytest.approx(COOLDOWN)
    clock.advance(0.5)
    assert breaker.retry_after() == pytest.approx(COOLDOWN - 0.5)
    clock.advance(COOLDOWN - 0.5)
    assert breaker.retry_after() == 0.0
    clock.advance(100.0)
    assert breaker.retry_after() == 0.0


def test_available_says_whether_a_request_could_go_without_taking_the_probe(
    breaker: Breaker, clock: FakeClock
) -> None:
    assert breaker.available()
    open_circuit(breaker)
    assert not breaker.available()
    clock.advance(COOLDOWN)
    assert breaker.available()
    assert breaker.available()  # asking does not take the probe slot
    assert breaker.allow()
    assert not breaker.available()
    breaker.record_success()
    assert breaker.available()


def test_a_late_failure_while_open_does_not_extend_the_open_period(
    breaker: Breaker, clock: FakeClock
) -> None:
    open_circuit(breaker)
    clock.advance(COOLDOWN / 2)
    for _ in range(5):  # requests sent before the circuit opened, failing late
        breaker.record_failure()
    assert breaker.retry_after() == pytest.approx(COOLDOWN / 2)
    clock.advance(COOLDOWN / 2)
    assert breaker.state is State.HALF_OPEN
    breaker.record_failure()  # still late, not the probe: it is not in flight yet
    assert breaker.allow()
