"""Re-checks a chaos run folder offline and redraws its plot.

    python -m dht.history.report RUN_DIR [--plot PATH] [--clock-slack SECONDS]

Reads the history, faults and final state a chaos run saved (dht/history/run_folder.py),
checks them again with `dht.history.checker.check` (no cluster needed: the checker is a pure
function of the history and the final state), prints the summary line, what became of
each write (`dht.history.classification`) and, if the check failed, what failed; then
redraws the Jepsen-style plot. Use it to look at a run that
failed in CI, or to re-judge old runs after a change to the checker.

Exit status: 0 when the check passes, 1 when it fails, 2 when the folder is missing or
unreadable (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dht.history.checker import CLOCK_SLACK, check
from dht.history.classification import classify
from dht.history.run_folder import PLOT_FILE, RunFolderError, read_run

PASSED, FAILED, UNREADABLE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m dht.history.report",
        description=(
            "Re-check a chaos run folder offline: read its history.jsonl, faults.jsonl and "
            "final.json, run the history checker on them, print the verdict (and what "
            "failed), and redraw the plot."
        ),
        epilog="Exit status: 0 the check passes, 1 it fails, 2 the folder is unreadable.",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a chaos run folder")
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="PATH",
        help=f"where to draw the plot (default RUN_DIR/{PLOT_FILE})",
    )
    parser.add_argument(
        "--clock-slack",
        type=float,
        default=CLOCK_SLACK,
        metavar="SECONDS",
        help=f"how far apart two writes must be to be ordered (default {CLOCK_SLACK:g})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command on `argv` (default: the process's arguments); returns the exit
    status."""
    args = _parser().parse_args(argv)
    try:
        run = read_run(args.run_dir)
        report = check(run.history, run.final, args.clock_slack, run.final_at)
    except RunFolderError as error:
        print(f"dht.history.report: {error}", file=sys.stderr)
        return UNREADABLE
    except ValueError as error:  # a written key with no final state
        print(f"dht.history.report: {args.run_dir}: cannot check: {error}", file=sys.stderr)
        return UNREADABLE
    print(f"{run.scenario}: {report.summary()}")
    judged = classify(run.history, run.final, args.clock_slack, run.final_at, report)
    print(f"writes: {judged.line()}")
    if not report.ok:
        print(report.details())
    path: Path = args.plot or args.run_dir / PLOT_FILE
    try:
        from dht.history import plot  # matplotlib is only needed for the picture
    except ImportError as error:
        print(f"dht.history.report: no plot drawn: {error}", file=sys.stderr)
    else:
        try:
            plot.draw(run, report, path)
        except OSError as error:
            print(f"dht.history.report: no plot drawn: {error}", file=sys.stderr)
        else:
            print(f"plot: {path}")
    return PASSED if report.ok else FAILED


if __name__ == "__main__":
    sys.exit(main())
