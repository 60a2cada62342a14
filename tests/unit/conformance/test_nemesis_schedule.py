"""The nemesis's schedule (dht/conformance/nemesis_schedule.py): drawn from a seed, the
same every time, one fault at a time, and only of the kinds this machine can apply."""

from __future__ import annotations

from dht.conformance.nemesis_schedule import KINDS, LEAD_SECONDS, TAIL_SECONDS, Schedule, draw


def test_the_same_seed_length_and_kinds_give_the_same_schedule() -> None:
    assert draw(7, 120.0) == draw(7, 120.0)
    assert draw(7, 120.0).to_json() == draw(7, 120.0).to_json()
    assert draw(7, 120.0) != draw(8, 120.0)


def test_a_schedule_round_trips_through_json() -> None:
    schedule = draw(11, 60.0, {"power": "no FUSE"})
    assert Schedule.from_json(schedule.to_json()) == schedule


def test_faults_follow_one_another_one_node_at_a_time_within_the_run() -> None:
    for seed in range(50):
        schedule = draw(seed, 90.0)
        assert schedule.faults, seed
        for before, after in zip(schedule.faults, schedule.faults[1:], strict=False):
            assert before.end < after.start
        assert schedule.faults[-1].end <= 90.0 - TAIL_SECONDS
        assert all(0 <= fault.node < 3 for fault in schedule.faults)


def test_every_kind_is_drawn_in_a_long_run() -> None:
    assert {fault.kind for fault in draw(3, 600.0).faults} == set(KINDS)


def test_kinds_this_machine_cannot_apply_are_left_out_and_say_why() -> None:
    left_out = {"clock": "libfaketime is missing", "cut": "not root", "slow": "not root"}
    schedule = draw(5, 300.0, left_out)
    assert {fault.kind for fault in schedule.faults} <= {"kill", "pause", "power", "disk"}
    assert schedule.kinds == ("kill", "pause", "power", "disk")
    assert schedule.left_out == left_out


def test_no_kind_at_all_is_a_schedule_without_faults() -> None:
    assert draw(1, 60.0, dict.fromkeys(KINDS, "no")).faults == ()


def test_keeping_a_subset_keeps_each_fault_at_its_time() -> None:
    schedule = draw(9, 120.0)
    kept = schedule.keeping([schedule.faults[2], schedule.faults[0]])
    assert kept.faults == (schedule.faults[0], schedule.faults[2])
    assert kept.seed == schedule.seed


def test_a_subset_runs_until_its_last_fault_heals_and_the_tail() -> None:
    schedule = draw(9, 120.0)
    kept = schedule.keeping(schedule.faults[:2])
    assert kept.seconds == round(schedule.faults[1].end + TAIL_SECONDS, 1)
    assert schedule.keeping(schedule.faults).seconds <= schedule.seconds
    assert schedule.keeping([]).seconds == LEAD_SECONDS + TAIL_SECONDS


def test_each_fault_has_a_label_for_the_timeline() -> None:
    labels = {fault.label() for fault in draw(3, 600.0).faults}
    assert any(label.startswith("kill -9 node") for label in labels)
    assert any("'s clock " in label for label in labels)
    assert any(label.startswith("disk full on node") for label in labels)
