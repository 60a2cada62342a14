"""Every chaos run leaves a run folder: the history the clients recorded, the faults as
they were applied, the final state the checker judged, and what the checker and a
Jepsen-style plot made of it. A failed run can then be looked at, and re-checked offline
(`python -m dht.history.report RUN_DIR`), long after its cluster is gone.

A run folder holds:

- `history.jsonl`: one operation per line, in invoke order: `{"op", "key", "value",
  "ttl", "start", "end", "status", "outcome", "node"}`; `end` and `status` are null for
  an operation that got no answer, `outcome` is "ok" (a 2xx or a 404), "timeout" (no
  answer) or the status ("503", "504", ...). Values are bytes written as latin-1 text,
  so any byte string comes back as it was.
- `faults.jsonl`: `{"fault", "start", "end"}` per fault, as applied.
- `final.json`: `{"final": {key: value or null}, "final_at": [from, to] or {key: [from,
  to]}}`: the state observed after the heal and when; an infinite time is written null.
- `run.json`: the scenario, when the folder was written (UTC) and free-form details.
- `summary.txt` and `plot.png`: the checker's verdict and the picture, as written.
- `classification.json`: `{"counts": {kind: n}, "examples": {kind: [line, ...]}}`, what
  became of each write (`dht.history.classification`): stable, lost, stale, never read,
  undone, invented, indeterminate, and the first few of each kind.

Times are seconds from the run's first event (its earliest invocation or fault start),
not the monotonic clock they were recorded on: that clock means nothing outside the
process, and the checker only compares times with each other.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dht.history.checker import check
from dht.history.classification import classify
from dht.history.operation import Kind, Op, Window
from dht.history.run import FaultWindow, Run, outcome, relative, run_origin

__all__ = ["FaultWindow", "Run", "new_run_dir", "read_run", "run_origin", "write_run"]

HISTORY_FILE = "history.jsonl"
FAULTS_FILE = "faults.jsonl"
FINAL_FILE = "final.json"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.txt"
CLASSIFICATION_FILE = "classification.json"
PLOT_FILE = "plot.png"
ORIGIN_NOTE = "times are seconds from the run's first event"
# Where run folders go unless DHT_CHAOS_RUNS says otherwise.
RUNS_ENV = "DHT_CHAOS_RUNS"


class RunFolderError(Exception):
    """A run folder, or one of its files, is missing or unreadable; the message is one
    line naming the file."""


def runs_root() -> Path:
    """Where run folders go: `$DHT_CHAOS_RUNS` if set, else `artifacts/chaos-runs` in the
    current folder (the repository's top, where pytest runs the scenarios)."""
    configured = os.environ.get(RUNS_ENV)
    return Path(configured) if configured else Path.cwd() / "artifacts" / "chaos-runs"


def new_run_dir(scenario: str, root: Path | None = None) -> Path:
    """Creates and returns a fresh folder for one run of `scenario` in `root` (by default
    `runs_root()`), named after it, the UTC time and this process
    (`flapping-20250101-120000-4242`); a second run of the same scenario within the same
    second gets a `-2`, `-3`, ... suffix instead of sharing."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    base = (root or runs_root()) / f"{scenario}-{stamp}-{os.getpid()}"
    base.parent.mkdir(parents=True, exist_ok=True)
    candidate, number = base, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            number += 1
            candidate = base.with_name(f"{base.name}-{number}")


# -- writing ---------------------------------------------------------------------------


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode("latin-1")


def _time(moment: float, origin: float) -> float | None:
    return None if math.isinf(moment) else moment - origin


def _moment(value: float | None) -> float:
    return math.inf if value is None else float(value)


def _window_out(window: Window, origin: float) -> list[float | None]:
    return [_time(window[0], origin), _time(window[1], origin)]


def _op_record(op: Op, origin: float) -> dict[str, Any]:
    return {
        "op": op.kind.value,
        "key": op.key,
        "value": _text(op.value),
        "ttl": op.ttl,
        "start": op.invoked - origin,
        "end": None if op.completed is None else op.completed - origin,
        "status": op.status,
        "outcome": outcome(op.status),
        "node": op.node,
        "replicas": op.replicas,
    }


def _dump(value: Any) -> str:
    # allow_nan=False: an infinity or NaN must have been mapped to null, never written
    # as the non-JSON `Infinity`.
    return json.dumps(value, allow_nan=False, default=str)


def write_run(run_dir: Path, run: Run) -> Path:
    """Writes `run` into `run_dir` (created if need be; files already there are
    replaced), checks it with `dht.history.checker.check` and draws it. Returns the path of
    the plot.

    The data files are written before the check, so a run the checker refuses (a written
    key with no final state raises ValueError) still leaves its history to look at."""
    run_dir.mkdir(parents=True, exist_ok=True)
    origin = run_origin(run)
    ops = sorted(run.history, key=lambda op: op.invoked)
    (run_dir / HISTORY_FILE).write_text("".join(_dump(_op_record(op, origin)) + "\n" for op in ops))
    (run_dir / FAULTS_FILE).write_text(
        "".join(
            _dump({"fault": f.label, "start": f.start - origin, "end": f.end - origin}) + "\n"
            for f in run.faults
        )
    )
    final_at: list[float | None] | dict[str, list[float | None]]
    if isinstance(run.final_at, tuple):
        final_at = _window_out(run.final_at, origin)
    else:
        final_at = {key: _window_out(seen, origin) for key, seen in run.final_at.items()}
    final = {key: _text(value) for key, value in run.final.items()}
    (run_dir / FINAL_FILE).write_text(
        json.dumps({"final": final, "final_at": final_at}, allow_nan=False, indent=1) + "\n"
    )
    meta = {
        "scenario": run.scenario,
        "written_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "origin_note": ORIGIN_NOTE,
        "details": run.details,
    }
    (run_dir / RUN_FILE).write_text(json.dumps(meta, allow_nan=False, indent=1, default=str) + "\n")

    report = check(run.history, run.final, final_at=run.final_at)
    (run_dir / SUMMARY_FILE).write_text(report.summary() + "\n" + report.details() + "\n")
    # Counted from the run's first event, as the files are, so an example's time can be
    # looked up in them.
    shifted = relative(run)
    classification = classify(shifted.history, shifted.final, final_at=shifted.final_at)
    (run_dir / CLASSIFICATION_FILE).write_text(
        json.dumps(
            {"counts": classification.counts(), "examples": classification.examples()},
            allow_nan=False,
            indent=1,
        )
        + "\n"
    )
    from dht.history import plot  # matplotlib only when a picture is drawn

    path = run_dir / PLOT_FILE
    plot.draw(run, report, path)
    return path


# -- reading ---------------------------------------------------------------------------


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunFolderError(f"{path}: unreadable: {error}") from None
    except json.JSONDecodeError as error:
        raise RunFolderError(f"{path}: malformed JSON: {error}") from None


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RunFolderError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunFolderError(f"{path}: unreadable: {error}") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise RunFolderError(f"{path} line {number}: malformed JSON: {error}") from None


def _op(record: Mapping[str, Any]) -> Op:
    end = record["end"]
    ttl = record["ttl"]
    return Op(
        kind=Kind(record["op"]),
        key=str(record["key"]),
        value=_bytes(record["value"]),
        invoked=float(record["start"]),
        completed=None if end is None else float(end),
        status=None if record["status"] is None else int(record["status"]),
        ttl=None if ttl is None else float(ttl),
        node=record.get("node"),
        replicas=record.get("replicas"),
    )


def _window_in(value: Any) -> Window:
    start, end = value
    return (_moment(start), _moment(end))


def read_run(run_dir: Path) -> Run:
    """Reads back a folder `write_run` wrote. Times stay relative to the run's first
    event. Raises RunFolderError (one line, naming the file) when the folder or a data
    file is missing, or a file is not what `write_run` writes."""
    if not run_dir.is_dir():
        raise RunFolderError(f"{run_dir}: no such run folder")
    history: list[Op] = []
    path = run_dir / HISTORY_FILE
    for number, record in _lines(path):
        try:
            history.append(_op(record))
        except (KeyError, TypeError, ValueError, AttributeError, UnicodeEncodeError) as error:
            raise RunFolderError(f"{path} line {number}: not an operation: {error!r}") from None
    faults: list[FaultWindow] = []
    path = run_dir / FAULTS_FILE
    for number, record in _lines(path):
        try:
            faults.append(
                FaultWindow(str(record["fault"]), float(record["start"]), float(record["end"]))
            )
        except (KeyError, TypeError, ValueError) as error:
            raise RunFolderError(f"{path} line {number}: not a fault: {error!r}") from None
    path = run_dir / FINAL_FILE
    saved = _load(path)
    try:
        final = {str(key): _bytes(value) for key, value in saved["final"].items()}
        seen = saved["final_at"]
        final_at: Window | dict[str, Window] = (
            {str(key): _window_in(window) for key, window in seen.items()}
            if isinstance(seen, dict)
            else _window_in(seen)
        )
    except (KeyError, TypeError, ValueError, AttributeError, UnicodeEncodeError) as error:
        raise RunFolderError(f"{path}: not a final state: {error!r}") from None
    path = run_dir / RUN_FILE
    meta = _load(path)
    try:
        scenario = str(meta["scenario"])
        details = dict(meta.get("details") or {})
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RunFolderError(f"{path}: not a run description: {error!r}") from None
    return Run(scenario, history, faults, final, final_at, details)
