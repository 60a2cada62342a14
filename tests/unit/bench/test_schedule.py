"""The constant-rate benchmark's send schedule (bench.schedule)."""

from __future__ import annotations

import pytest

from bench.schedule import Schedule, send_offsets


def test_request_i_is_due_at_i_over_the_rate_for_the_duration() -> None:
    assert list(send_offsets(rate=4, duration=2)) == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]


def test_the_schedule_holds_every_request_due_before_the_end() -> None:
    assert Schedule(200, 2).count == 400
    assert Schedule(3, 1).count == 3
    assert Schedule(2.5, 1).count == 3  # 0, 0.4, 0.8
    assert Schedule(0.5, 3).count == 2  # 0, 2
    assert Schedule(1000, 0.0001).count == 1


def test_the_schedule_is_exact_for_rates_that_do_not_divide_a_second() -> None:
    schedule = Schedule(3000, 30)
    assert schedule.count == 90_000
    assert schedule.offset(89_999) < 30 <= schedule.offset(90_000)


def test_iterating_gives_indexes_in_order_with_their_offsets() -> None:
    assert list(Schedule(2, 1.5)) == [(0, 0.0), (1, 0.5), (2, 1.0)]


@pytest.mark.parametrize(("rate", "duration"), [(0, 1), (-5, 1), (10, 0), (10, -1)])
def test_a_non_positive_rate_or_duration_is_refused(rate: float, duration: float) -> None:
    with pytest.raises(ValueError):
        Schedule(rate, duration)
