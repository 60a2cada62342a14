"""Run folders (dht/history/run_folder.py), their plot (dht/history/plot.py) and the
offline re-check (`python -m dht.history.report`), on a hand-made history: no cluster, no servers.

The history has what a chaos run records: PUTs with and without a ttl, DELETEs, GETs
answered 200 and 404, a 503, a 504 and an operation that got no answer, each sent to a
named node, under two faults.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

from dht.conformance.rules import rule
from dht.history import plot
from dht.history.checker import AFTER_EVERYTHING, Kind, Op, check
from dht.history.run_folder import (
    FaultWindow,
    Run,
    RunFolderError,
    new_run_dir,
    read_run,
    run_origin,
    runs_root,
    write_run,
)
from tests.launcher import run_module

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
T0 = 7000.0  # a monotonic clock's reading: far from 0, as in a real run
# Not ASCII, not UTF-8: any byte string must come back as it was.
ODD_VALUE = b"a2-\xff\x00caf\xc3\xa9"


def synthetic_run() -> Run:
    """A clean run: the checker passes it."""
    history = [
        Op(Kind.PUT, "a", b"a1", T0 + 0.00, T0 + 0.01, 201, None, "node1"),
        Op(Kind.PUT, "b", b"b1", T0 + 0.02, T0 + 0.03, 201, 1.0, "node2"),
        Op(Kind.GET, "a", b"a1", T0 + 0.10, T0 + 0.11, 200, None, "node2"),
        Op(Kind.PUT, "a", ODD_VALUE, T0 + 0.20, T0 + 0.21, 201, None, "node3"),
        Op(Kind.PUT, "a", b"a3", T0 + 0.30, T0 + 0.301, 503, None, "node1"),
        Op(Kind.DELETE, "c", None, T0 + 0.30, T0 + 0.31, 202, None, "node1"),
        Op(Kind.GET, "c", None, T0 + 0.35, T0 + 0.36, 404, None, "node3"),
        Op(Kind.PUT, "c", b"c1", T0 + 0.40, T0 + 0.60, 504, None, "node2"),
        Op(Kind.GET, "b", b"b1", T0 + 0.50, T0 + 0.51, 200, None, "node1"),
        Op(Kind.PUT, "c", b"c2", T0 + 0.70, None, None, 2.0, "node3"),
        Op(Kind.GET, "b", None, T0 + 2.50, T0 + 2.51, 404, None, "node2"),
    ]
    faults = [
        FaultWindow("cut links into node2", T0 + 0.25, T0 + 0.80),
        FaultWindow("latency over the deadline from node3", T0 + 1.00, T0 + 1.50),
    ]
    final: dict[str, bytes | None] = {"a": ODD_VALUE, "b": None, "c": None}
    final_at = {"a": (T0 + 5.0, T0 + 5.01), "b": (T0 + 5.02, T0 + 5.03), "c": AFTER_EVERYTHING}
    details = {"seed": 2020, "seconds": 3.0, "client_timeout": 1.0}
    return Run("synthetic", history, faults, final, final_at, details)


def run_report(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("dht.history.report", *args, timeout=120)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk."""
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Run, Path]:
    run = synthetic_run()
    assert check(run.history, run.final, final_at=run.final_at).ok
    write_run(tmp_path / "run", run)
    return run, tmp_path / "run"


@rule("9.8")
def test_a_run_folder_gives_back_the_run_it_was_written_from(saved: tuple[Run, Path]) -> None:
    run, run_dir = saved
    back = read_run(run_dir)
    origin = run_origin(run)
    assert origin == T0

    def shifted(op: Op) -> Op:
        completed = None if op.completed is None else op.completed - origin
        return dataclasses.replace(op, invoked=op.invoked - origin, completed=completed)

    assert back.history == [shifted(op) for op in sorted(run.history, key=lambda o: o.invoked)]
    assert back.history[0].invoked == 0.0
    assert back.faults == [
        FaultWindow(f.label, f.start - origin, f.end - origin) for f in run.faults
    ]
    assert back.final == run.final
    assert back.final_at == {
        "a": pytest.approx((5.0, 5.01)),
        "b": pytest.approx((5.02, 5.03)),
        "c": (math.inf, math.inf),
    }
    assert back.scenario == "synthetic"
    assert back.details == run.details
    original = check(run.history, run.final, final_at=run.final_at)
    again = check(back.history, back.final, final_at=back.final_at)
    assert again.summary() == original.summary()
    assert (run_dir / "summary.txt").read_text().startswith(original.summary() + "\n")


@rule("9.8")
def test_run_folder_files_are_the_documented_json(saved: tuple[Run, Path]) -> None:
    _, run_dir = saved
    lines = (run_dir / "history.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 11
    assert records[0] == {
        "op": "PUT",
        "key": "a",
        "value": "a1",
        "ttl": None,
        "start": 0.0,
        "end": pytest.approx(0.01),
        "status": 201,
        "outcome": "ok",
        "node": "node1",
        "replicas": None,
    }
    assert [record["outcome"] for record in records] == [
        "ok", "ok", "ok", "ok", "503", "ok", "ok", "504", "ok", "timeout", "ok",
    ]  # fmt: skip
    no_answer = records[9]
    assert (no_answer["end"], no_answer["status"], no_answer["ttl"]) == (None, None, 2.0)
    faults = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
    assert faults[0] == {
        "fault": "cut links into node2",
        "start": pytest.approx(0.25),
        "end": pytest.approx(0.80),
    }
    final = json.loads((run_dir / "final.json").read_text())
    assert final["final"] == {"a": ODD_VALUE.decode("latin-1"), "b": None, "c": None}
    assert final["final_at"]["c"] == [None, None]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["scenario"] == "synthetic"
    assert meta["written_at"].endswith("+00:00")
    assert meta["details"]["seed"] == 2020


@rule("9.8")
def test_one_final_window_for_every_key_round_trips(tmp_path: Path) -> None:
    run = dataclasses.replace(synthetic_run(), final_at=AFTER_EVERYTHING, faults=[])
    write_run(tmp_path, run)
    back = read_run(tmp_path)
    assert back.final_at == (math.inf, math.inf)
    assert back.faults == []
    finite = dataclasses.replace(run, final_at=(T0 + 4.0, T0 + 4.5))
    write_run(tmp_path, finite)
    assert read_run(tmp_path).final_at == pytest.approx((4.0, 4.5))


@rule("9.8")
def test_the_report_command_passes_a_clean_run(saved: tuple[Run, Path]) -> None:
    run, run_dir = saved
    (run_dir / "plot.png").unlink()
    result = run_report(str(run_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = check(run.history, run.final, final_at=run.final_at).summary()
    assert summary in result.stdout
    assert "lost=0" in result.stdout
    assert "writes: stable=" in result.stdout and "indeterminate=" in result.stdout
    assert (run_dir / "plot.png").read_bytes().startswith(PNG_SIGNATURE)


@rule("9.8")
def test_the_report_command_fails_a_lost_write(saved: tuple[Run, Path], tmp_path: Path) -> None:
    """The final state holds a1, older than the acknowledged PUT of ODD_VALUE: lost."""
    _, run_dir = saved
    path = run_dir / "final.json"
    final = json.loads(path.read_text())
    final["final"]["a"] = "a1"
    path.write_text(json.dumps(final))
    elsewhere = tmp_path / "elsewhere.png"
    result = run_report(str(run_dir), "--plot", str(elsewhere))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "lost=1" in result.stdout
    assert "lost, final b'a1'" in result.stdout  # the details name the write
    assert elsewhere.read_bytes().startswith(PNG_SIGNATURE)


@rule("9.8")
def test_the_report_command_refuses_a_missing_folder_in_one_line(tmp_path: Path) -> None:
    result = run_report(str(tmp_path / "no-such-run"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no-such-run" in result.stderr


@rule("9.8")
def test_the_report_command_refuses_malformed_json_in_one_line(
    saved: tuple[Run, Path],
) -> None:
    _, run_dir = saved
    with (run_dir / "history.jsonl").open("a") as history:
        history.write("{not json\n")
    result = run_report(str(run_dir))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "history.jsonl line 12" in result.stderr


@rule("9.8")
def test_read_run_names_the_missing_or_malformed_file(saved: tuple[Run, Path]) -> None:
    _, run_dir = saved
    (run_dir / "final.json").write_text('{"final": {"a": 1')
    with pytest.raises(RunFolderError, match=r"final\.json: malformed JSON"):
        read_run(run_dir)
    (run_dir / "faults.jsonl").unlink()
    with pytest.raises(RunFolderError, match=r"faults\.jsonl: missing"):
        read_run(run_dir)


@rule("9.8")
def test_the_plot_is_a_png_of_the_expected_size(saved: tuple[Run, Path]) -> None:
    _, run_dir = saved
    path = run_dir / "plot.png"
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    assert path.stat().st_size > 10_000
    assert png_size(path) == (1400, 800)


@rule("9.8")
def test_the_plot_draws_a_run_without_faults_or_operations(tmp_path: Path) -> None:
    no_faults = dataclasses.replace(synthetic_run(), faults=[], details={})
    report = check(no_faults.history, no_faults.final, final_at=no_faults.final_at)
    plot.draw(no_faults, report, tmp_path / "no-faults.png")
    empty = Run("empty", [], [], {}, AFTER_EVERYTHING, {})
    plot.draw(empty, check([], {}), tmp_path / "empty.png")
    faults_only = Run("faults only", [], [FaultWindow("cut links into node1", 3.0, 4.0)], {})
    plot.draw(faults_only, check([], {}), tmp_path / "faults-only.png")
    for name in ("no-faults.png", "empty.png", "faults-only.png"):
        assert (tmp_path / name).read_bytes().startswith(PNG_SIGNATURE)
        assert png_size(tmp_path / name) == (1400, 800)


@rule("9.8")
def test_new_run_dirs_go_under_the_configured_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DHT_CHAOS_RUNS", str(tmp_path / "runs"))
    assert runs_root() == tmp_path / "runs"
    first, second = new_run_dir("flapping"), new_run_dir("flapping")
    assert first.is_dir() and second.is_dir() and first != second
    assert first.parent == tmp_path / "runs"
    assert re.fullmatch(rf"flapping-\d{{8}}-\d{{6}}-{os.getpid()}(-\d+)?", first.name)
    monkeypatch.delenv("DHT_CHAOS_RUNS")
    monkeypatch.chdir(tmp_path)
    assert runs_root() == tmp_path / "artifacts" / "chaos-runs"
