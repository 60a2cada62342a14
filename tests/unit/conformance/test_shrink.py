"""Delta debugging over a failing run's faults (dht/conformance/shrink.py), with a fake
run: `fails` says whether a subset of faults makes the run fail."""

from __future__ import annotations

from itertools import count

from dht.conformance.shrink import ddmin, split


def test_one_culprit_among_many_is_found() -> None:
    shrunk = ddmin(range(20), lambda subset: 13 in subset)
    assert shrunk.smallest == (13,)
    assert shrunk.minimal


def test_two_faults_that_fail_only_together_are_both_kept() -> None:
    shrunk = ddmin(range(16), lambda subset: 3 in subset and 11 in subset)
    assert shrunk.smallest == (3, 11)
    assert shrunk.minimal


def test_the_result_is_one_minimal() -> None:
    def fails(subset: tuple[int, ...]) -> bool:
        return sum(subset) >= 30 and len(subset) >= 2

    shrunk = ddmin(range(12), fails)
    assert fails(shrunk.smallest)
    for index in range(len(shrunk.smallest)):
        assert not fails(shrunk.smallest[:index] + shrunk.smallest[index + 1 :])


def test_a_run_that_fails_without_any_fault_shrinks_to_none() -> None:
    shrunk = ddmin(range(5), lambda subset: True)
    assert shrunk.smallest == ()
    assert shrunk.tries == 1


def test_out_of_time_keeps_the_smallest_failing_subset_found_so_far() -> None:
    tries = count()
    shrunk = ddmin(
        range(32), lambda subset: 5 in subset, out_of_time=lambda subset: next(tries) >= 3
    )
    assert 5 in shrunk.smallest
    assert len(shrunk.smallest) < 32
    assert not shrunk.minimal
    assert shrunk.tries == 3


def test_split_makes_chunks_of_nearly_equal_size_in_order() -> None:
    assert split((1, 2, 3, 4, 5), 2) == [(1, 2, 3), (4, 5)]
    assert split((1, 2), 4) == [(1,), (2,)]


def test_out_of_time_is_asked_with_the_subset_about_to_be_tried() -> None:
    asked: list[tuple[int, ...]] = []
    ddmin(
        range(4), lambda subset: 2 in subset, out_of_time=lambda subset: bool(asked.append(subset))
    )
    assert asked[0] == ()
    assert (0, 1) in asked and (2, 3) in asked


def test_an_unresolved_try_is_never_taken_for_a_pass() -> None:
    """Fault 7 fails the run; a try holding 7 alone cannot run. Taking it for a pass
    would call (6, 7) 1-minimal; unresolved, the result is not claimed minimal."""

    def fails(subset: tuple[int, ...]) -> bool | None:
        if subset == (7,):
            return None
        return 7 in subset

    shrunk = ddmin(range(8), fails)
    assert 7 in shrunk.smallest
    assert not shrunk.minimal
    assert shrunk.unresolved >= 1


def test_an_unresolved_try_is_not_reduced_to() -> None:
    shrunk = ddmin(range(4), lambda subset: None if subset == (0, 1) else 3 in subset)
    assert shrunk.smallest == (3,)
    assert shrunk.minimal
    assert shrunk.unresolved == 1


def test_one_culprit_is_not_minimal_when_the_empty_run_was_unresolved() -> None:
    shrunk = ddmin(range(4), lambda subset: None if not subset else 2 in subset)
    assert shrunk.smallest == (2,)
    assert not shrunk.minimal
