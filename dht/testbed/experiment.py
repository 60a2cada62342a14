"""A recorded experiment: the cockpit's "record" switch. While it is on, the probe keeps
every operation it sends; when it is switched off, the cockpit reads the final state of
every key the recording wrote, takes the faults applied meanwhile from its timeline and
writes a run folder, the same as a chaos scenario's (`dht.history.run_folder`: history,
faults, final state, the checker's summary and a Jepsen-style plot), so a person's
experiment is judged like a test's: lost acknowledged writes, resurrected deletes,
values from nowhere and stale reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from dht.history.run import Run
from dht.history.run_folder import PLOT_FILE, SUMMARY_FILE, new_run_dir, write_run
from dht.history.verdict import Report
from dht.testbed.fault_timeline import FaultTimeline
from dht.testbed.probe import FINAL_READ_DEADLINE, MAX_RECORDED, TIMEOUT, Probe

log = logging.getLogger("dht.testbed.cockpit")

SCENARIO = "cockpit"


class ExperimentError(Exception):
    """Recording cannot start or stop now; the message says why."""


@dataclass
class Result:
    """One recorded experiment, as the page lists it."""

    folder: str  # the run folder's name, under the runs folder
    seconds: float
    summary: str  # the checker's one line, or why the run could not be checked
    ok: bool | None  # None: not checked
    figures: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "seconds": round(self.seconds, 1),
            "summary": self.summary,
            "ok": self.ok,
            "figures": self.figures,
            "plot": f"runs/{self.folder}/{PLOT_FILE}",
            "details": f"runs/{self.folder}/{SUMMARY_FILE}",
        }


class Experiment:
    def __init__(
        self,
        probe: Probe,
        timeline: FaultTimeline,
        runs: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.probe = probe
        self.timeline = timeline
        self.runs = runs
        self._clock = clock
        self.started: float | None = None
        self.started_wall: float | None = None
        self.checking = False
        self.results: list[Result] = []

    def start(self) -> None:
        if self.probe.rate <= 0:
            raise ExperimentError(
                "the probe load is off (--probe-rate 0): there is nothing to record"
            )
        if self.started is not None or self.checking:
            raise ExperimentError("an experiment is being recorded already")
        self.probe.record()
        self.started, self.started_wall = self._clock(), time.time()
        log.info("recording an experiment (the probe's operations and the faults)")

    async def stop(self, session: aiohttp.ClientSession) -> Result:
        """Stops the recording, reads the final state, checks and writes the run folder."""
        if self.started is None or self.checking:
            raise ExperimentError("no experiment is being recorded")
        started, self.started = self.started, None
        self.checking = True
        try:
            ops = await self.probe.recorded()
            stopped = self._clock()
            written = {op.key for op in ops if op.is_write}
            final, final_at, unread = await self.probe.final_state(session, written)
            run = Run(
                SCENARIO,
                ops,
                self.timeline.windows(started, stopped),
                final,
                final_at,
                {
                    "probe_rate": self.probe.rate,
                    "client_timeout": TIMEOUT,
                    "nodes": self.probe.nodes,
                    "dropped_operations": self.probe.dropped,
                },
            )
            folder = new_run_dir(SCENARIO, self.runs)
            result = await asyncio.to_thread(
                _write, folder, run, unread, self.probe.dropped, stopped - started
            )
        finally:
            self.checking = False
        self.results.append(result)
        log.info("experiment written to %s: %s", folder, result.summary)
        return result

    def as_json(self) -> dict[str, Any]:
        return {
            "recording": self.started is not None,
            "checking": self.checking,
            "seconds": None if self.started is None else round(self._clock() - self.started, 1),
            "probe_rate": self.probe.rate,
            "results": [result.as_json() for result in reversed(self.results)],
        }


def _write(folder: Path, run: Run, unread: list[str], dropped: int, seconds: float) -> Result:
    """Writes and checks the run (matplotlib draws for a second: off the event loop)."""
    from dht.history.checker import check

    if dropped:
        # The oldest operations are gone: a value read may come from a write the
        # history no longer has, and would be judged one from nowhere.
        write_run(folder, run)
        summary = (
            f"not checked: the recording outgrew {MAX_RECORDED} operations and dropped "
            f"its oldest {dropped}; record shorter experiments (or a lower --probe-rate)"
        )
        (folder / SUMMARY_FILE).write_text(summary + "\n")
        return Result(folder.name, seconds, summary, None)
    if unread:
        # The data files are written before the check, which refuses a written key with
        # no final state: the history stays to look at, unjudged.
        try:
            write_run(folder, run)
        except ValueError:
            pass
        shown = ", ".join(unread[:5]) + (" ..." if len(unread) > 5 else "")
        summary = (
            f"not checked: no node answered a final read of {len(unread)} written "
            f"key(s) ({shown}) within {FINAL_READ_DEADLINE:.0f} s; start the nodes and record again"
        )
        (folder / SUMMARY_FILE).write_text(summary + "\n")
        return Result(folder.name, seconds, summary, None)
    write_run(folder, run)
    report = check(run.history, run.final, final_at=run.final_at)
    return Result(folder.name, seconds, report.summary(), report.ok, _figures(report))


def _figures(report: Report) -> dict[str, int]:
    return {
        "ops": report.ops,
        "acked": report.acked,
        "lost": len(report.lost),
        "resurrected": len(report.resurrected),
        "phantoms": len(report.phantoms),
        "stale_reads": len(report.stale_reads),
    }
