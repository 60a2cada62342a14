"""The history checker on hand-made histories (no cluster): it must pass what last write
wins allows and fail what it does not."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht.history.checker import CLOCK_SLACK, KeyHistory, Kind, Op, check


def put(
    key: str,
    value: bytes,
    invoked: float,
    completed: float | None,
    status: int | None,
    ttl: float | None = None,
) -> Op:
    return Op(Kind.PUT, key, value, invoked, completed, status, ttl)


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


def test_a_final_state_holding_a_deleted_value_is_a_resurrection() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), delete("a", 0.2, 0.3, 202)]
    report = check(history, {"a": b"a1"})
    assert not report.ok and not report.final_state_ok
    assert report.lost == ()
    assert [(r.value, r.dead_by.kind, r.in_final_state) for r in report.resurrected] == [
        (b"a1", Kind.DELETE, True)
    ]
    assert "resurrected=1" in report.summary()


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


def test_a_read_without_an_answer_is_not_an_acknowledged_write() -> None:
    """A GET that timed out (no status) once counted as acknowledged: None matched the
    missing acknowledgement status of a GET."""
    timed_out = Op(Kind.GET, "a", None, 0.2, None, None)
    assert not timed_out.acknowledged
    report = check([put("a", b"a1", 0.0, 0.1, 201), timed_out], {"a": b"a1"})
    assert (report.acked, report.timeouts) == (1, 1)


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


def test_a_quorum_read_that_sees_a_deleted_value_is_a_resurrection() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        delete("a", 0.2, 0.3, 202),
        get("a", b"a1", 0.4, 0.5, 200),
    ]
    report = check(history, {"a": None})
    assert report.final_state_ok and not report.reads_ok
    assert report.stale_reads == ()
    assert [(r.source, r.dead_by.kind) for r in report.resurrected] == [
        ("GET at 0.400", Kind.DELETE)
    ]


# -- reads held only to the writes their quorum meets (`overlaps`, SPEC.md rule 3.5):
# on three nodes, a GET at 1/3 need not see a PUT or a DELETE at 2/3; at 2/3 it must.


def on_three_nodes(read: str | None, write: str | None) -> bool:
    """A_read + A_write > F for `A/3` (None: the default, 2/3)."""
    acks = [int((replicas or "2/3").split("/")[0]) for replicas in (read, write)]
    return sum(acks) > 3


def at(op: Op, replicas: str) -> Op:
    return dataclasses.replace(op, replicas=replicas)


def test_a_read_whose_quorum_misses_the_write_may_return_the_value_before_it() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("a", b"a2", 0.2, 0.3, 201),
        at(get("a", b"a1", 0.4, 0.5, 200), "1/3"),
        at(get("a", None, 0.4, 0.5, 404), "1/3"),
    ]
    assert check(history, {"a": b"a2"}, overlaps=on_three_nodes).ok
    assert len(check(history, {"a": b"a2"}).stale_reads) == 2  # by default, all meet


def test_a_read_whose_quorum_meets_the_write_must_see_it() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        at(put("a", b"a2", 0.2, 0.3, 201), "3/3"),
        at(get("a", b"a1", 0.4, 0.5, 200), "1/3"),
    ]
    report = check(history, {"a": b"a2"}, overlaps=on_three_nodes)
    assert [(stale.read.value, stale.missed.value) for stale in report.stale_reads] == [
        (b"a1", b"a2")
    ]


def test_a_read_that_need_not_see_a_delete_may_see_the_value_before_it() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        delete("a", 0.2, 0.3, 202),
        at(get("a", b"a1", 0.4, 0.5, 200), "1/3"),
    ]
    assert check(history, {"a": None}, overlaps=on_three_nodes).ok


def test_a_read_is_held_to_the_last_write_its_quorum_meets() -> None:
    """A 1/3 read after a PUT at 3/3 and a DELETE at 2/3 may see the PUT's value, not
    the one before it."""
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        at(put("a", b"a2", 0.2, 0.3, 201), "3/3"),
        delete("a", 0.4, 0.5, 202),
        at(get("a", b"a2", 0.6, 0.7, 200), "1/3"),
        at(get("a", b"a1", 0.6, 0.7, 200), "1/3"),
    ]
    report = check(history, {"a": None}, overlaps=on_three_nodes)
    assert [(stale.read.value, stale.missed.value) for stale in report.stale_reads] == [
        (b"a1", b"a2")
    ]


def test_a_read_whose_quorum_meets_no_write_still_invents_nothing() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), at(get("a", b"a9", 0.2, 0.3, 200), "1/3")]
    report = check(history, {"a": b"a1"}, overlaps=on_three_nodes)
    assert [phantom.value for phantom in report.phantoms] == [b"a9"]


def test_the_final_state_holds_every_acknowledged_write_whatever_its_quorum() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), at(put("a", b"a2", 0.2, 0.3, 201), "1/3")]
    report = check(history, {"a": b"a1"}, overlaps=on_three_nodes)
    assert [lost.write.value for lost in report.lost] == [b"a2"]


# -- expiring writes (SPEC.md rule 8.6): PUT a1 with ttl=1 at [0.0, 0.1] expires between
# 1.0 and 1.1; reads within CLOCK_SLACK of that window may go either way.


def test_an_expired_value_read_after_its_expiry_as_absent_passes() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201, ttl=1), get("a", None, 1.2, 1.3, 404)]
    report = check(history, {"a": None}, final_at=(1.5, 1.6))
    assert report.ok, report.details()
    assert report.expiring == 1


def test_an_expired_value_may_read_either_way_around_its_expiry() -> None:
    # The coordinator's clock at the write is somewhere in [0.0, 0.1]: so is its expiry.
    for read in (get("a", b"a1", 1.05, 1.08, 200), get("a", None, 0.98, 1.0, 404)):
        report = check([put("a", b"a1", 0.0, 0.1, 201, ttl=1), read], {"a": None})
        assert report.ok, report.details()
    for final_at in ((0.995, 0.995), (1.105, 1.105)):
        for final in (b"a1", None):
            report = check([put("a", b"a1", 0.0, 0.1, 201, ttl=1)], {"a": final}, final_at=final_at)
            assert report.ok, (final_at, final, report.details())


def test_a_value_read_well_after_its_expiry_is_a_resurrection() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201, ttl=1), get("a", b"a1", 1.5, 1.6, 200)]
    report = check(history, {"a": None}, final_at=(2.0, 2.0))
    assert report.final_state_ok and not report.reads_ok
    assert [(r.value, r.source, r.dead_by.ttl) for r in report.resurrected] == [
        (b"a1", "GET at 1.500", 1)
    ]
    assert "after it expired" in report.details()
    assert report.lost == () and report.stale_reads == ()


def test_an_expired_value_in_the_final_state_is_a_resurrection() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 504, ttl=1)]  # even unacknowledged: it expired
    report = check(history, {"a": b"a1"}, final_at=(5.0, 5.0))
    assert not report.final_state_ok
    assert [(r.value, r.in_final_state) for r in report.resurrected] == [(b"a1", True)]
    # The default final state is observed after everything: every ttl expired.
    assert not check(history, {"a": b"a1"}).final_state_ok


def test_an_expiring_value_must_be_seen_before_its_expiry() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201, ttl=1), get("a", None, 0.5, 0.6, 404)]
    report = check(history, {"a": b"a1"}, final_at=(0.7, 0.7))
    assert report.final_state_ok and not report.reads_ok
    assert [stale.missed.value for stale in report.stale_reads] == [b"a1"]
    # Absent from the final state before it can have expired: lost, not resurrected.
    report = check(history[:1], {"a": None}, final_at=(0.7, 0.8))
    assert [lost.write.value for lost in report.lost] == [b"a1"]
    assert report.resurrected == ()


def test_an_expired_write_does_not_bring_back_the_value_it_overwrote() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        put("a", b"a2", 0.2, 0.3, 201, ttl=1),
        get("a", None, 2.0, 2.1, 404),
        get("a", b"a1", 2.2, 2.3, 200),
    ]
    report = check(history, {"a": b"a1"}, final_at=(3.0, 3.0))
    assert report.lost == () and report.stale_reads == ()
    assert [(r.source, r.dead_by.value) for r in report.resurrected] == [
        ("final read", b"a2"),
        ("GET at 2.200", b"a2"),
    ]
    assert check(history[:3], {"a": None}, final_at=(3.0, 3.0)).ok


def test_a_later_put_without_ttl_keeps_the_key() -> None:
    history = [
        put("a", b"a1", 0.0, 0.1, 201, ttl=1),
        put("a", b"a2", 0.5, 0.6, 201),
        get("a", b"a2", 5.0, 5.1, 200),
    ]
    assert check(history, {"a": b"a2"}, final_at=(10.0, 10.0)).ok
    assert check(history, {"a": b"a2"}).ok  # long after every ttl
    report = check(history, {"a": None}, final_at=(10.0, 10.0))
    assert [lost.write.value for lost in report.lost] == [b"a2"]
    assert report.resurrected == ()
    report = check([*history, get("a", None, 6.0, 6.1, 404)], {"a": b"a2"})
    assert [stale.missed.value for stale in report.stale_reads] == [b"a2"]


def test_a_later_put_with_ttl_expires_the_key_again() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201), put("a", b"a2", 0.5, 0.6, 201, ttl=2)]
    assert check(history, {"a": b"a2"}, final_at=(1.0, 1.0)).ok
    assert check(history, {"a": None}, final_at=(3.0, 3.0)).ok
    report = check(history, {"a": None}, final_at=(1.0, 1.0))  # before a2 can expire
    assert b"a2" in [lost.write.value for lost in report.lost]
    assert report.resurrected == ()


def test_a_delete_after_an_expiring_put_keeps_the_key_absent() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201, ttl=3), delete("a", 0.5, 0.6, 202)]
    assert check(history, {"a": None}, final_at=(1.0, 1.0)).ok
    report = check(history, {"a": b"a1"}, final_at=(1.0, 1.0))
    assert [r.dead_by.kind for r in report.resurrected] == [Kind.DELETE]


def test_lost_and_resurrected_are_told_apart_on_one_key() -> None:
    # a1 deleted, then a3 written: a final a1 both resurrects a1 and loses a3.
    history = [
        put("a", b"a1", 0.0, 0.1, 201),
        delete("a", 0.2, 0.3, 202),
        put("a", b"a3", 0.4, 0.5, 201),
    ]
    report = check(history, {"a": b"a1"})
    assert [lost.write.value for lost in report.lost] == [b"a3"]
    assert [r.dead_by.kind for r in report.resurrected] == [Kind.DELETE]


def test_the_final_state_may_be_observed_at_a_time_per_key() -> None:
    history = [put("a", b"a1", 0.0, 0.1, 201, ttl=1), put("b", b"b1", 0.0, 0.1, 201, ttl=1)]
    final_at = {"a": (0.5, 0.6), "b": (2.0, 2.1)}
    assert check(history, {"a": b"a1", "b": None}, final_at=final_at).ok
    assert not check(history, {"a": None, "b": b"b1"}, final_at=final_at).ok


def test_the_expiry_window_widens_by_the_clock_slack() -> None:
    # Expired by 1.1 at the latest; a read beginning within CLOCK_SLACK after may see it.
    just_after = 1.1 + CLOCK_SLACK / 2
    history = [put("a", b"a1", 0.0, 0.1, 201, ttl=1), get("a", b"a1", just_after, 1.2, 200)]
    assert check(history, {"a": None}).ok
    assert not check(history, {"a": None}, clock_slack=0.0).reads_ok


# A node 1 s ahead reads a record of another coordinator as expired 1 s early (SPEC.md
# rule 8.6), and both clocks read whole milliseconds. The history: a DELETE at 2/2, a
# PUT, a ttl=2 PUT 0.3 s later through another node, then a GET through the node ahead,
# 1.3 s after the PUT.
SKEW = 1.0


def early_expiry_history(get_invoked: float) -> list[Op]:
    return [
        Op(Kind.DELETE, "k", None, 0.0, 0.01, 202, node="node3", replicas="2/2"),
        Op(Kind.PUT, "k", b"kept", 1.3, 1.31, 201, node="node1"),
        Op(Kind.PUT, "k", b"expiring", 1.6, 1.61, 201, ttl=2, node="node3"),
        Op(Kind.GET, "k", None, get_invoked, get_invoked + 0.0006, 404, node="node2"),
    ]


def test_a_read_through_a_clock_ahead_may_find_an_expiry_a_millisecond_short_of_the_skew() -> None:
    # Answered 999.6 ms after the ttl=2 PUT was invoked: the coordinator read its clock
    # just before a millisecond ticked, the node ahead just after one, 999.x ms apart.
    history = early_expiry_history(2.599)
    assert check(history, {"k": None}, clock_slack=SKEW + CLOCK_SLACK).ok
    # The skew alone as slack leaves no room for the clocks' milliseconds.
    report = check(history, {"k": None}, clock_slack=SKEW)
    assert [stale.missed.value for stale in report.stale_reads] == [b"kept"]


def test_a_read_that_misses_a_write_well_before_the_skew_allows_an_expiry_is_stale() -> None:
    # 950 ms after the ttl=2 PUT: not expired even on a clock 1 s ahead; "kept" or
    # "expiring" must be seen.
    report = check(early_expiry_history(2.55), {"k": None}, clock_slack=SKEW + CLOCK_SLACK)
    assert report.final_state_ok and not report.reads_ok
    assert [stale.missed.value for stale in report.stale_reads] == [b"kept"]


_times = st.floats(min_value=0, max_value=20, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(
    writes=st.lists(
        st.tuples(
            st.booleans(), _times, st.one_of(st.none(), _times), st.sampled_from([None, 1, 2])
        ),
        max_size=30,
    ),
    until=_times,
    invoked_by=st.one_of(_times, st.just(math.inf)),
    slack=st.sampled_from([CLOCK_SLACK, 1.0, 3.0]),
)
def test_the_indexed_absence_query_answers_as_a_pass_over_every_write_would(
    writes: list[tuple[bool, float, float | None, int | None]],
    until: float,
    invoked_by: float,
    slack: float,
) -> None:
    """The checker's index for "which write could have left the key absent, by when"
    (a read that found it absent asks it): the same answer as a pass over every DELETE
    and expiring PUT, which took hours on a 10-minute run of 16 keys."""
    ops = []
    for number, (is_delete, invoked, duration, ttl) in enumerate(writes):
        completed = None if duration is None else invoked + duration
        status = None if completed is None else (202 if is_delete else 201)
        if is_delete:
            ops.append(delete("k", invoked, completed, status))
        else:
            ops.append(put("k", f"v{number}".encode(), invoked, completed, status, ttl))
    history = KeyHistory(ops, slack)
    passed_over = max(
        (op.settled_by for op in history.producers(None, (0.0, until)) if op.invoked <= invoked_by),
        default=-math.inf,
    )
    assert history.produced_by(None, (0.0, until), invoked_by) == passed_over
