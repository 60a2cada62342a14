"""A run folder's picture, in the style of Jepsen's latency plot: what every operation
saw, and when, against the faults that were applied meanwhile.

- A track at the top names each fault, at the time it ran.
- The top panel has one point per operation at (invoke time, latency), latency on a log
  scale, coloured by outcome (ok, 503, 504, no answer, other) and shaped by kind (PUT,
  GET, DELETE). An operation that got no answer is drawn at the client's time-out, so
  time-outs form a band along the top. Operations the checker blamed (a lost write, a
  stale read, a GET that saw a dead value or one from nowhere) are ringed.
- The bottom panel has the throughput: operations finished per second, per outcome (an
  operation with no answer counts when the client gave up on it).
- Fault windows are shaded across both panels, one colour per kind of fault.
- The title is the checker's verdict.

Times are seconds since the run's first event, whether the run came straight from a
test (monotonic clock) or from a run folder (already relative).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display; before pyplot picks a backend

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator

from chaos.operation import Kind, Op
from chaos.run import FaultWindow, Run, outcome, run_origin
from chaos.verdict import Phantom, Report, Resurrection

WIDTH, HEIGHT, DPI = 14.0, 8.0, 100
# The panels' horizontal extent (figure fraction); the legends go right of them.
LEFT, RIGHT = 0.065, 0.82
OUTCOME_COLOURS = {
    "ok": "#2c7fb8",
    "503": "#fd8d3c",
    "504": "#d7191c",
    "timeout": "#252525",
}
OTHER_COLOUR = "#7b3294"
MARKERS = {Kind.PUT: "o", Kind.GET: "^", Kind.DELETE: "s"}
# Light colours for the kinds of fault, in the order they first appear.
FAULT_COLOURS = [
    "#e6ab02",
    "#66a61e",
    "#e7298a",
    "#7570b3",
    "#1b9e77",
    "#a6761d",
    "#666666",
    "#d95f02",
]
SHADE_ALPHA = 0.16
# The fault track: at most this many rows of labels before shorter labels are used.
MAX_ROWS = 4
ROW_INCHES = 0.22
LABEL_SIZE = 7.5
# Used when the run does not say (`details["client_timeout"]`, seconds).
DEFAULT_TIMEOUT_MS = 1000.0
FLOOR_MS = 0.01  # latencies are drawn at least this high on the log scale


@dataclass(frozen=True)
class _Points:
    """The operations as plotted: times since the origin, latencies in ms."""

    start: np.ndarray
    latency: np.ndarray
    outcome: list[str]
    kind: list[Kind]


def _outcome_colour(name: str) -> str:
    return OUTCOME_COLOURS.get(name, OTHER_COLOUR)


def _outcome_order(names: Sequence[str]) -> list[str]:
    """ok first (drawn underneath, it is most of them), failures on top of it."""
    rank = {"ok": 0, "503": 2, "504": 3, "timeout": 4}
    return sorted(set(names), key=lambda name: (rank.get(name, 1), name))


def client_timeout_ms(run: Run) -> float:
    """Where operations without an answer are drawn: the client's time-out if the run
    recorded it (`details["client_timeout"]`, seconds), else the slowest answer or one
    second, whichever is longer."""
    recorded = run.details.get("client_timeout")
    if isinstance(recorded, int | float) and recorded > 0:
        return float(recorded) * 1000.0
    answered = [
        (op.completed - op.invoked) * 1000.0 for op in run.history if op.completed is not None
    ]
    return max([DEFAULT_TIMEOUT_MS, *answered])


def _points(ops: Sequence[Op], origin: float, timeout_ms: float) -> _Points:
    start = np.array([op.invoked - origin for op in ops], dtype=float)
    latency = np.array(
        [
            timeout_ms if op.completed is None else (op.completed - op.invoked) * 1000.0
            for op in ops
        ],
        dtype=float,
    )
    return _Points(
        start,
        np.maximum(latency, FLOOR_MS),
        [outcome(op.status) for op in ops],
        [op.kind for op in ops],
    )


def fault_kind(label: str) -> str:
    """A fault's label without the node it hit: "cut links into node2" -> "cut links
    into"."""
    return re.sub(r"\s*\bnode\d+\b", "", label).strip() or label


def short_label(label: str) -> str:
    """A fault's label cut to its first word and node: "cut node2"."""
    words = label.split()
    node = re.search(r"\bnode\d+\b", label)
    if not words:
        return label
    if node is None or words[0] == node.group():
        return words[0]
    return f"{words[0]} {node.group()}"


def _span(run: Run, points: _Points, origin: float) -> tuple[float, float]:
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


def _pack(lefts: Sequence[float], widths: Sequence[float], gap: float) -> list[int]:
    """Rows for labels that start at `lefts` and are `widths` long (pixels), each in the
    first row where it clears the labels already there (in the order given: by start)."""
    row_ends: list[float] = []
    rows: list[int] = []
    for left, width in zip(lefts, widths, strict=True):
        for row, end in enumerate(row_ends):
            if end + gap <= left:
                row_ends[row] = left + width
                rows.append(row)
                break
        else:
            row_ends.append(left + width)
            rows.append(len(row_ends) - 1)
    return rows


def _fault_labels(
    figure: Figure, faults: Sequence[FaultWindow], origin: float, span: tuple[float, float]
) -> tuple[list[str], list[int], list[float]]:
    """The labels for the fault track, their rows and where they start (seconds): the
    whole labels if they fit in MAX_ROWS rows, else short ones (first word and node),
    else numbers in order. A label that would run off the right edge starts earlier."""
    if not faults:
        return [], [], []
    panel_px = (RIGHT - LEFT) * WIDTH * DPI
    scale = panel_px / (span[1] - span[0])
    starts = [(fault.start - origin - span[0]) * scale for fault in faults]
    bars = [max(0.0, (fault.end - fault.start) * scale) for fault in faults]
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    candidates = [
        [fault.label for fault in faults],
        [short_label(fault.label) for fault in faults],
        [str(number) for number in range(1, len(faults) + 1)],
    ]
    for labels in candidates:
        widths = []
        for label in labels:
            text = figure.text(0, 0, " " + label, fontsize=LABEL_SIZE)
            widths.append(text.get_window_extent(renderer).width + 4.0)
            text.remove()
        lefts = [
            max(0.0, min(start, panel_px - width))
            for start, width in zip(starts, widths, strict=True)
        ]
        ends = [
            max(left + width, start + bar)
            for left, width, start, bar in zip(lefts, widths, starts, bars, strict=True)
        ]
        rows = _pack(lefts, [end - left for left, end in zip(lefts, ends, strict=True)], gap=4.0)
        if max(rows) < MAX_ROWS or labels is candidates[-1]:
            at = [span[0] + left / scale for left in lefts]
            return labels, [row % MAX_ROWS for row in rows], at
    raise AssertionError("unreachable")


def _shade(axes: Sequence[Axes], faults: Sequence[FaultWindow], origin: float) -> None:
    colours = _fault_colours(faults)
    for fault in faults:
        colour = colours[fault_kind(fault.label)]
        for axis in axes:
            axis.axvspan(
                fault.start - origin,
                fault.end - origin,
                facecolor=colour,
                alpha=SHADE_ALPHA,
                edgecolor="none",
                zorder=0,
            )


def _fault_colours(faults: Sequence[FaultWindow]) -> dict[str, str]:
    kinds = list(dict.fromkeys(fault_kind(fault.label) for fault in faults))
    return {kind: FAULT_COLOURS[index % len(FAULT_COLOURS)] for index, kind in enumerate(kinds)}


def _draw_track(
    track: Axes,
    faults: Sequence[FaultWindow],
    labels: Sequence[str],
    rows: Sequence[int],
    at: Sequence[float],
    origin: float,
) -> None:
    """One bar per fault over its window, labelled from `at` (its start, unless that
    would run off the edge), in packed rows."""
    colours = _fault_colours(faults)
    count = max(rows) + 1
    for fault, label, row, left in zip(faults, labels, rows, at, strict=True):
        colour = colours[fault_kind(fault.label)]
        start, end = fault.start - origin, fault.end - origin
        track.broken_barh(
            [(start, max(end - start, 0.0))], (row + 0.72, 0.2), facecolors=colour, alpha=0.8
        )
        track.text(
            left, row + 0.62, " " + label, fontsize=LABEL_SIZE, va="bottom", ha="left", clip_on=True
        )
    track.set_ylim(count, 0)
    track.set_yticks([])
    track.tick_params(axis="x", labelbottom=False, length=0)
    for side in ("top", "right", "left", "bottom"):
        track.spines[side].set_visible(False)
    track.set_ylabel("faults", rotation=0, ha="right", va="center", fontsize=9)


def _scatter(top: Axes, points: _Points) -> list[str]:
    """The latency points, a group per (outcome, kind); returns the outcomes drawn."""
    names = _outcome_order(points.outcome)
    outcomes = np.array(points.outcome, dtype=object)
    kinds = np.array([kind.value for kind in points.kind], dtype=object)
    for name in names:
        for kind, marker in MARKERS.items():
            chosen = (outcomes == name) & (kinds == kind.value)
            if not chosen.any():
                continue
            failed = name != "ok"
            top.scatter(
                points.start[chosen],
                points.latency[chosen],
                s=9 if failed else 5,
                marker=marker,
                color=_outcome_colour(name),
                alpha=0.7 if failed else 0.35,
                linewidths=0,
                zorder=3 if failed else 2,
                rasterized=True,
            )
    return names


def _blamed(run: Run, report: Report) -> dict[str, list[Op]]:
    """The operations the checker blamed, by what went wrong: lost writes (the PUT),
    stale reads and GETs that saw a dead value or one never written."""
    blamed: dict[str, list[Op]] = {
        "lost write": [item.write for item in report.lost],
        "stale read": [item.read for item in report.stale_reads],
    }
    seen: list[Resurrection | Phantom] = [*report.resurrected, *report.phantoms]
    # Such a report names its GET by key, value and "GET at <invoke time>".
    sources = {(item.key, item.value, item.source) for item in seen if not item.in_final_state}
    if sources:
        blamed["read of a dead or unknown value"] = [
            op
            for op in run.history
            if op.kind is Kind.GET and (op.key, op.value, f"GET at {op.invoked:.3f}") in sources
        ]
    return {what: ops for what, ops in blamed.items() if ops}


def _ring(top: Axes, run: Run, report: Report, origin: float, timeout_ms: float) -> list[Line2D]:
    """Rings the operations the checker blamed; returns their legend entries."""
    styles = {
        "lost write": "#d7191c",
        "stale read": "#e7298a",
        "read of a dead or unknown value": "#7b3294",
    }
    handles = []
    for what, ops in _blamed(run, report).items():
        points = _points(ops, origin, timeout_ms)
        few = len(ops) <= 50  # a handful stand out; thousands must not hide the rest
        top.scatter(
            points.start,
            points.latency,
            s=70 if few else 24,
            facecolors="none",
            edgecolors=styles[what],
            linewidths=1.4 if few else 0.7,
            alpha=1.0 if few else 0.5,
            zorder=5,
        )
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                linestyle="",
                markerfacecolor="none",
                markeredgecolor=styles[what],
                markersize=8,
                label=textwrap.fill(f"{what} ({len(ops):,})", 26),
            )
        )
    return handles


def _throughput(
    bottom: Axes, run: Run, origin: float, span: tuple[float, float], timeout_ms: float
) -> None:
    """Operations finished per second, per outcome, in 1 s bins (0.5 s for a short run).
    An operation with no answer counts when the client gave up on it."""
    width = 1.0 if span[1] - span[0] >= 20.0 else 0.5
    edges = np.arange(span[0], span[1] + width, width)
    if len(edges) < 2:
        edges = np.array([span[0], span[0] + width])
    finished: dict[str, list[float]] = {}
    for op in run.history:
        moment = op.completed if op.completed is not None else op.invoked + timeout_ms / 1000.0
        finished.setdefault(outcome(op.status), []).append(moment - origin)
    peak = 0.0
    for name in _outcome_order(list(finished)):
        counts, _ = np.histogram(finished[name], bins=edges)
        rates = counts / width
        peak = max(peak, float(rates.max(initial=0.0)))
        bottom.stairs(
            rates,
            edges,
            color=_outcome_colour(name),
            linewidth=1.3 if name == "ok" else 1.1,
            baseline=None,
            zorder=3,
        )
    bottom.set_yscale("symlog", linthresh=10.0, linscale=0.6)
    bottom.set_ylim(0.0, max(peak * 1.6, 20.0))
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    bottom.set_ylabel(f"finished, ops/s\n({width:g} s bins)")
    bottom.grid(True, axis="y", alpha=0.25, linewidth=0.6)


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
    points = _points(run.history, origin, timeout_ms)
    span = _span(run, points, origin)
    figure = plt.figure(figsize=(WIDTH, HEIGHT), dpi=DPI)
    try:
        labels, rows, at = _fault_labels(figure, run.faults, origin, span)
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
            _draw_track(track, run.faults, labels, rows, at, origin)
        _shade(panels, run.faults, origin)

        names = _scatter(top, points)
        top.set_yscale("log")
        low = float(points.latency.min()) if len(points.latency) else 1.0
        top.set_ylim(max(low / 1.6, FLOOR_MS), timeout_ms * 2.2)
        top.yaxis.set_major_locator(LogLocator(base=10))
        top.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        top.axhline(timeout_ms, color="#555555", linestyle="--", linewidth=0.8, zorder=1)
        top.text(
            1.0,
            timeout_ms * 1.12,
            f"client time-out {timeout_ms / 1000:g} s ",
            transform=top.get_yaxis_transform(),
            ha="right",
            va="bottom",
            fontsize=8,
            color="#555555",
        )
        top.set_ylabel("latency, ms (log)")
        top.grid(True, axis="y", which="major", alpha=0.25, linewidth=0.6)
        top.tick_params(axis="x", labelbottom=False)
        if not run.history:
            top.text(
                0.5,
                0.5,
                "no operations recorded",
                transform=top.transAxes,
                ha="center",
                va="center",
                fontsize=14,
                color="#777777",
            )
        _mark_final_reads(run, panels, origin, span)

        counts = Counter(points.outcome)
        outcome_handles: list[Line2D | Patch] = [
            Line2D(
                [],
                [],
                marker="o",
                linestyle="-",
                linewidth=1.2,
                color=_outcome_colour(name),
                markersize=6,
                label=f"{'no answer' if name == 'timeout' else name} ({counts[name]:,})",
            )
            for name in names
        ]
        kind_handles = [
            Line2D(
                [],
                [],
                marker=marker,
                linestyle="",
                color="#666666",
                markersize=6,
                label=f"{kind.value} ({points.kind.count(kind):,})",
            )
            for kind, marker in MARKERS.items()
        ]
        blamed = _ring(top, run, report, origin, timeout_ms)
        legend = top.legend(
            handles=outcome_handles + blamed,
            title="outcome",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
            title_fontsize=9,
            frameon=False,
        )
        top.add_artist(legend)
        top.legend(
            handles=kind_handles,
            title="operation",
            loc="lower left",
            bbox_to_anchor=(1.01, 0.0),
            fontsize=8,
            title_fontsize=9,
            frameon=False,
        )
        if run.faults:
            kinds = Counter(fault_kind(fault.label) for fault in run.faults)
            colours = _fault_colours(run.faults)
            bottom.legend(
                handles=[
                    Patch(
                        facecolor=colour,
                        alpha=0.45,
                        label=textwrap.fill(f"{kind} ({kinds[kind]})", 24),
                    )
                    for kind, colour in colours.items()
                ],
                title="faults",
                loc="upper left",
                bbox_to_anchor=(1.01, 1.05),
                fontsize=8,
                title_fontsize=9,
                frameon=False,
            )

        _throughput(bottom, run, origin, span, timeout_ms)
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
