"""The run folders a kit run's fault scenarios left in the report folder, read back as
the report shows them (`FaultRun`): the checker's line, what became of the writes,
whether there is a plot, and for a nemesis run its seed, schedule and shrink."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dht.conformance.nemesis import SCHEDULE_FILE, SHRINK_FILE, could_not_run, shrink_ending
from dht.conformance.nemesis_schedule import Schedule, draw
from dht.conformance.report import FaultRun
from dht.history.run_folder import CLASSIFICATION_FILE, PLOT_FILE, SUMMARY_FILE


def fault_runs(out: Path, runs: Path) -> list[FaultRun]:
    """The run folders the fault scenarios left, oldest first, as the report links them."""
    found = []
    for folder in (
        sorted(runs.iterdir(), key=lambda path: path.stat().st_mtime) if runs.is_dir() else []
    ):
        summary = folder / SUMMARY_FILE
        classification = classification_of(folder)
        found.append(
            FaultRun(
                folder.relative_to(out).as_posix(),
                summary.read_text().splitlines()[0] if summary.exists() else "(no summary)",
                (folder / PLOT_FILE).exists(),
                classification.get("counts", {}),
                classification.get("examples", {}),
                nemesis_notes(folder),
            )
        )
    return found


def nemesis_notes(folder: Path) -> tuple[str, ...]:
    """A nemesis run's seed and schedule (`schedule.json`), and for the smallest run a
    shrink found, what the shrink did (`shrink.json`); () for any other run."""
    try:
        schedule = json.loads((folder / SCHEDULE_FILE).read_text())
    except (OSError, ValueError):
        return ()
    faults = schedule.get("faults", [])
    count = f"{len(faults)} fault{'' if len(faults) == 1 else 's'}"
    # A shrunk schedule is a subset of its seed's: only its file gives it again.
    again = (
        f"`--seed {schedule.get('seed')} --nemesis-seconds {schedule.get('seconds', 0):g}`"
        if drawn_from_its_seed(folder / SCHEDULE_FILE)
        else f"`--nemesis-schedule {SCHEDULE_FILE}` (this run's file)"
    )
    notes = [
        f"Seed {schedule.get('seed')}, {schedule.get('seconds', 0):g} s, {count} "
        f"(of {', '.join(schedule.get('kinds', []))}): run it again with {again}."
    ]
    left_out = schedule.get("left_out", {})
    notes += [f"Left out: {kind}, {why}." for kind, why in sorted(left_out.items())]
    try:
        shrink = json.loads((folder / SHRINK_FILE).read_text())
    except (OSError, ValueError):
        shrink = None
    if isinstance(shrink, dict):
        unresolved = int(shrink.get("unresolved", 0))
        ending = shrink_ending(bool(shrink.get("minimal")), bool(shrink.get("finished", True)))
        notes.append(
            f"Shrunk from {shrink.get('original_faults')} faults to "
            f"{shrink.get('shrunk_faults')} in {shrink.get('seconds')} s "
            f"({shrink.get('tries')} runs{could_not_run(unresolved)}, {ending}); "
            f"the failing run was {shrink.get('failing_run')}."
        )
    return tuple(notes)


def classification_of(folder: Path) -> dict[str, Any]:
    """A run folder's `classification.json`, or {} where it has none (or an unreadable
    one: the report then shows "?" counts rather than failing the run)."""
    try:
        loaded = json.loads((folder / CLASSIFICATION_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def drawn_from_its_seed(path: Path) -> bool:
    """Whether the schedule in `path` is the one its seed draws (not a shrunk subset)."""
    try:
        schedule = Schedule.from_json(path.read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return draw(schedule.seed, schedule.seconds, schedule.left_out).faults == schedule.faults
