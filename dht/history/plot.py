"""A run folder's picture, in the style of Jepsen's latency plot: what every operation
saw, and when, against the faults that were applied meanwhile. This module lays out the
figure, with its title and the mark of the final reads across the panels; each part
drawn in it has a module of its own.

- A track at the top names each fault, at the time it ran (`dht.history.fault_track`).
- The top panel has one point per operation at (invoke time, latency), latency on a log
  scale, coloured by outcome (ok, 503, 504, no answer, other) and shaped by kind (PUT,
  GET, DELETE). An operation that got no answer is drawn at the client's time-out, so
  time-outs form a band along the top. Operations the checker blamed (a lost write, a
  stale read, a GET that saw a dead value or one from nowhere) are ringed
  (`dht.history.latency_panel`).
- The bottom panel has the throughput: operations finished per second, per outcome (an
  operation with no answer counts when the client gave up on it)
  (`dht.history.throughput_panel`).
- Fault windows are shaded across both panels, one colour per kind of fault
  (`dht.history.fault_track`); a dotted line marks where the final reads began.
- The title is the checker's verdict.

Times are seconds since the run's first event, whether the run came straight from a
test (monotonic clock) or from a run folder (already relative).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display; before pyplot picks a backend

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from dht.history.fault_track import ROW_INCHES, draw_track, fault_labels, fault_legend, shade
from dht.history.latency_panel import Points, client_timeout_ms, draw_latency, points_of
from dht.history.run import Run, run_origin
from dht.history.throughput_panel import draw_throughput
from dht.history.verdict import Report

WIDTH, HEIGHT, DPI = 14.0, 8.0, 100
# The panels' horizontal extent (figure fraction); the legends go right of them.
LEFT, RIGHT = 0.065, 0.82


def _span(run: Run, points: Points, origin: float) -> tuple[float, float]:
    """The x range: from the first event to the last answer, time-out given up on, or
    fault's end (the final reads, often long after, would squash the run)."""
    ends = [0.0, *(fault.end - origin for fault in run.faults)]
    if len(points.start):
        ends.append(float(np.max(points.start + points.latency / 1000.0)))
    end = max(ends)
    return (0.0, end * 1.005 if end > 0 else 1.0)


def _final_reads(run: Run) -> list[float]:
    """When the final state was observed (starts of finite windows)."""
    windows = [run.final_at] if isinstance(run.final_at, tuple) else run.final_at.values()
    return sorted({start for start, _ in windows if math.isfinite(start)})


def _mark_final_reads(
    run: Run, panels: Sequence[Axes], origin: float, span: tuple[float, float]
) -> None:
    """A dotted line where the final reads began, or a note at the right edge when they
    came after the end of the plot."""
    reads = _final_reads(run)
    if not reads:
        return
    top = panels[0]
    moment = reads[0] - origin
    if moment <= span[1]:
        for axis in panels:
            axis.axvline(moment, color="#333333", linestyle=":", linewidth=1.0, zorder=4)
        where, text = moment, "final reads "
    else:
        where, text = span[1], f"final reads at {moment:.1f} s → "
    top.text(
        where,
        0.02,
        text,
        transform=top.get_xaxis_transform(),
        ha="right",
        fontsize=8,
        color="#333333",
    )


def _title(run: Run, report: Report) -> tuple[str, str]:
    verdict = (
        f"{run.scenario} — {report.acked:,} acknowledged, {len(report.lost):,} lost, "
        f"{len(report.resurrected):,} resurrected, {len(report.stale_reads):,} stale reads"
    )
    if report.phantoms:
        verdict += f", {len(report.phantoms):,} phantoms"
    if not report.ok:
        verdict += " — FAILED"
    figures = [
        f"{report.ops:,} operations",
        f"{report.writes:,} writes",
        f"{report.unavailable:,} answered 503",
        f"{report.not_enough_replicas:,} answered 504",
        f"{report.timeouts:,} without an answer",
        f"{len(run.faults):,} faults",
    ]
    figures += [
        f"{name} {value}"
        for name, value in run.details.items()
        if isinstance(value, str | int | float) and not isinstance(value, bool)
    ][:4]
    return verdict, "   ·   ".join(figures)


def draw(run: Run, report: Report, path: Path) -> None:
    """Draws `run`, judged by `report`, into a PNG at `path` (14 x 8 inches, 100 dpi).
    Handles runs without faults, operations without answers and an empty history."""
    origin = run_origin(run)
    timeout_ms = client_timeout_ms(run)
    points = points_of(run.history, origin, timeout_ms)
    span = _span(run, points, origin)
    figure = plt.figure(figsize=(WIDTH, HEIGHT), dpi=DPI)
    try:
        panel_px = (RIGHT - LEFT) * WIDTH * DPI
        labels, rows, at = fault_labels(figure, run.faults, origin, span, panel_px)
        track_rows = max(rows) + 1 if rows else 0
        heights = [5.0, 2.1]
        if track_rows:
            heights.insert(0, track_rows * ROW_INCHES)
        grid = figure.add_gridspec(
            len(heights),
            1,
            height_ratios=heights,
            hspace=0.06,
            left=LEFT,
            right=RIGHT,
            top=0.905,
            bottom=0.075,
        )
        top = figure.add_subplot(grid[-2])
        bottom = figure.add_subplot(grid[-1], sharex=top)
        panels = [top, bottom]
        if track_rows:
            track = figure.add_subplot(grid[0], sharex=top)
            draw_track(track, run.faults, labels, rows, at, origin)
        shade(panels, run.faults, origin)
        draw_latency(top, run, report, points, origin, timeout_ms)
        _mark_final_reads(run, panels, origin, span)
        fault_legend(bottom, run.faults)
        draw_throughput(bottom, run, origin, span, timeout_ms)
        bottom.set_xlim(*span)
        bottom.set_xlabel("seconds since the run began")

        verdict, figures = _title(run, report)
        figure.text(
            LEFT,
            0.965,
            verdict,
            fontsize=13,
            fontweight="bold",
            color="#111111" if report.ok else "#b2182b",
            ha="left",
            va="center",
        )
        figure.text(LEFT, 0.935, figures, fontsize=8.5, color="#555555", ha="left", va="center")
        figure.savefig(path, dpi=DPI)
    finally:
        plt.close(figure)
