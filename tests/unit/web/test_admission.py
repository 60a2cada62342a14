"""The byte budget (dht.web.admission), with the heap trim observed."""

from __future__ import annotations

from dht.web.admission import TRIM_AFTER, ByteBudget


def test_bytes_past_the_limit_are_refused_and_counted() -> None:
    budget = ByteBudget(100, trim=lambda: None)
    assert budget.acquire(60)
    assert not budget.acquire(50)
    assert budget.acquire(40)
    assert (budget.in_flight, budget.refused) == (100, 1)
    budget.release(60)
    assert budget.acquire(50)


def test_one_value_larger_than_the_budget_passes_when_nothing_else_is_held() -> None:
    budget = ByteBudget(100, trim=lambda: None)
    assert budget.acquire(500)  # else a budget under --max-value-bytes refuses forever
    assert not budget.acquire(1)


def test_the_heap_is_trimmed_once_a_large_burst_is_over() -> None:
    trims: list[int] = []
    budget = ByteBudget(1 << 40, trim=lambda: trims.append(1))
    budget.acquire(TRIM_AFTER)
    budget.acquire(10)
    budget.release(TRIM_AFTER)
    assert trims == []  # still busy
    budget.release(10)
    assert trims == [1]
    budget.acquire(10)
    budget.release(10)
    assert trims == [1]  # a small one after it does not trim again
