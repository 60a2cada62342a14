"""The run folders a kit run left, read back for the report (dht/conformance/fault_runs.py):
a nemesis run's seed, schedule, what was left out and its shrink."""

from __future__ import annotations

import json
from pathlib import Path

from dht.conformance.fault_runs import nemesis_notes
from dht.conformance.nemesis_schedule import draw


def test_a_nemesis_run_names_its_seed_what_was_left_out_and_its_shrink(tmp_path: Path) -> None:
    drawn = draw(42, 30.0, {"clock": "libfaketime is missing"})
    schedule = drawn.keeping(drawn.faults[1:])
    (tmp_path / "schedule.json").write_text(schedule.to_json())
    shrink = {"original_faults": 5, "shrunk_faults": 1, "tries": 7, "seconds": 250.0}
    (tmp_path / "shrink.json").write_text(json.dumps(shrink | {"minimal": True}))
    notes = nemesis_notes(tmp_path)
    assert notes[0].startswith(f"Seed 42, {schedule.seconds:g} s, {len(schedule.faults)} faults")
    assert "`--nemesis-schedule schedule.json` (this run's file)" in notes[0]
    assert "Left out: clock, libfaketime is missing." in notes
    assert not any(note.startswith("Left out: disk") for note in notes)  # it is drawn
    assert notes[-1].startswith("Shrunk from 5 faults to 1 in 250.0 s (7 runs, 1-minimal)")


def test_a_shrink_whose_tries_could_not_run_says_so_and_claims_no_minimum(
    tmp_path: Path,
) -> None:
    (tmp_path / "schedule.json").write_text(draw(42, 30.0).to_json())
    shrink = {"original_faults": 5, "shrunk_faults": 2, "tries": 7, "seconds": 250.0}
    shrink |= {"minimal": False, "unresolved": 2, "finished": True}
    (tmp_path / "shrink.json").write_text(json.dumps(shrink))
    assert nemesis_notes(tmp_path)[-1].startswith(
        "Shrunk from 5 faults to 2 in 250.0 s (7 runs; 2 tries could not be run, "
        "not shown 1-minimal: a try it needed could not run)"
    )


def test_a_run_drawn_from_its_seed_is_run_again_with_the_seed(tmp_path: Path) -> None:
    (tmp_path / "schedule.json").write_text(draw(42, 30.0).to_json())
    assert "`--seed 42 --nemesis-seconds 30`" in nemesis_notes(tmp_path)[0]


def test_any_other_run_has_no_notes(tmp_path: Path) -> None:
    assert nemesis_notes(tmp_path) == ()
