"""The history checker on hand-made histories (no cluster): it must pass what last write
wins allows and fail what it does not."""

from __future__ import annotations

import pytest

from chaos.history import Kind, Op, check


def put(key: str, value: bytes, invoked: float, completed: float | None, status: int | None) -> Op:
    return Op(Kind.PUT, key, value, invoked, completed, status)


def delete(key: str, invoked: float, completed: float | None, status: int | None) -> Op:
    return Op(Kind.DELETE, key, None, invoked, completed, status)


def get(key: str, value: bytes | None, invoked: float, completed: float, status: int) -> Op:
    return Op(Kind.GET, key, value, invoked, completed, status)


def test_a_clean_history_passes() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("b", b"b1", 0.0, 0.1, 201),
        get("a", b"a1", 0.2, 0.3, 200),
        put("a", b"a2", 0.4, 0.5, 201),
        delete("b", 0.4, 0.5, 202),
        get("b", None, 0.6, 0.7, 404),
    ]
    report = check(history, {"a": b"a2", "b": None})
    assert report.ok, report.details()
    assert (report.ops, report.writes, report.acked) == (6, 4, 4)
    assert (report.unavailable, report.not_enough_replicas, report.timeouts) == (0, 0, 0)


def test_a_history_that_loses_an_acknowledged_write_fails() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), put("a", b"a2", 0.2, 0.3, 201)]
    report = check(history, {"a": b"a1"})
    assert not report.ok
    assert [lost.write.value for lost in report.lost] == [b"a2"]


def test_an_acknowledged_write_missing_from_the_final_state_fails() -> None:
    report = check([put("a", b"a1", 0.0, 0.1, 201)], {"a": None})
    assert [lost.write.value for lost in report.lost] == [b"a1"]


def test_a_final_value_that_was_never_written_fails() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), put("b", b"b1", 0.0, 0.1, 201)]
    report = check(history, {"a": b"a1", "b": b"a1"})  # b holds a value only `a` was sent
    assert not report.ok
    assert [(phantom.key, phantom.value) for phantom in report.phantoms] == [("b", b"a1")]


def test_a_read_of_a_value_never_written_fails() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), get("a", b"zz", 0.2, 0.3, 200)]
    report = check(history, {"a": b"a1"})
    assert [phantom.value for phantom in report.phantoms] == [b"zz"]


def test_an_acknowledged_write_overwritten_by_a_later_acknowledged_write_passes() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), put("a", b"a2", 0.2, 0.3, 201)]
    assert check(history, {"a": b"a2"}).ok


def test_an_acknowledged_write_overwritten_by_a_concurrent_write_passes() -> None:
    history = [put("a", b"a1", 0.0, 0.3, 201), put("a", b"a2", 0.1, 0.2, 201)]
    assert check(history, {"a": b"a1"}).ok
    assert check(history, {"a": b"a2"}).ok


@pytest.mark.parametrize("status", [503, 504, None], ids=["503", "504", "timeout"])
def test_an_unacknowledged_write_that_did_take_effect_passes(status: int | None) -> None:
    completed = None if status is None else 0.3
    history = [put("a", b"a1", 0.0, 0.1, 201), put("a", b"a2", 0.2, completed, status)]
    report = check(history, {"a": b"a2"})
    assert report.ok, report.details()
    assert report.acked == 1


def test_an_unacknowledged_write_that_did_not_take_effect_passes() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), put("a", b"a2", 0.2, 0.3, 504)]
    assert check(history, {"a": b"a1"}).ok


def test_a_failed_write_that_ended_before_an_acknowledged_one_cannot_overwrite_it() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 504), put("a", b"a2", 0.2, 0.3, 201)]
    assert [lost.write.value for lost in check(history, {"a": b"a1"}).lost] == [b"a2"]


def test_a_timed_out_write_may_take_effect_after_a_later_acknowledged_one() -> None:
    # The coordinator may still be working on a write whose client gave up.
    history = [put("a", b"a1", 0.0, None, None), put("a", b"a2", 5.0, 5.1, 201)]
    assert check(history, {"a": b"a1"}).ok


def test_a_delete_acknowledged_then_the_key_present_with_an_older_value_fails() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), delete("a", 0.2, 0.3, 202)]
    report = check(history, {"a": b"a1"})
    assert not report.ok
    assert [lost.write.kind for lost in report.lost] == [Kind.DELETE]


def test_a_put_after_an_acknowledged_delete_may_bring_the_key_back() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        delete("a", 0.2, 0.3, 202),
        put("a", b"a2", 0.4, 0.5, 504),
    ]
    assert check(history, {"a": b"a2"}).ok
    assert check(history, {"a": None}).ok


def test_writes_closer_than_the_clock_guarantee_count_as_concurrent() -> None:
    # SPEC.md rule 8.3 orders writes only 10 ms apart: 2 ms apart may tie either way.
    history = [put("a", b"a1", 0.0, 0.100, 201), put("a", b"a2", 0.102, 0.2, 201)]
    assert check(history, {"a": b"a1"}).ok
    assert not check(history, {"a": b"a1"}, clock_slack=0.0).ok


def test_the_report_counts_failures_by_kind() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("a", b"a2", 0.0, 0.1, 503),
        put("a", b"a3", 0.0, 0.1, 504),
        delete("a", 0.0, 0.1, 504),
        put("a", b"a4", 0.0, None, None),
        put("a", b"a5", 0.0, 0.1, 500),
    ]
    report = check(history, {"a": b"a4"})
    assert report.ok
    assert (report.ops, report.writes, report.acked) == (6, 6, 1)
    assert (report.unavailable, report.not_enough_replicas) == (1, 2)
    assert (report.timeouts, report.other_failures) == (1, 1)


def test_a_written_key_without_a_final_read_is_an_error() -> None:
    with pytest.raises(ValueError, match="no final state"):
        check([put("a", b"a1", 0.0, 0.1, 201)], {})


def test_a_quorum_read_that_misses_an_acknowledged_write_fails() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("a", b"a2", 0.2, 0.3, 201),
        get("a", b"a1", 0.4, 0.5, 200),
    ]
    report = check(history, {"a": b"a2"})
    assert not report.ok
    assert [(stale.read.value, stale.missed.value) for stale in report.stale_reads] == [
        (b"a1", b"a2")
    ]


def test_a_read_of_absent_after_an_acknowledged_put_fails() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), get("a", None, 0.2, 0.3, 404)]
    assert len(check(history, {"a": b"a1"}).stale_reads) == 1


def test_a_read_of_absent_after_an_acknowledged_delete_passes() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        delete("a", 0.2, 0.3, 202),
        get("a", None, 0.4, 0.5, 404),
    ]
    assert check(history, {"a": None}).ok


def test_a_read_concurrent_with_a_write_may_see_either_value() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("a", b"a2", 0.2, 0.4, 201),
        get("a", b"a1", 0.3, 0.5, 200),
        get("a", b"a2", 0.3, 0.5, 200),
    ]
    assert check(history, {"a": b"a2"}).ok


def test_a_read_may_see_an_unacknowledged_write_or_not() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("a", b"a2", 0.2, 0.3, 504),
        get("a", b"a1", 0.4, 0.5, 200),
        get("a", b"a2", 0.6, 0.7, 200),
    ]
    assert check(history, {"a": b"a2"}).ok
