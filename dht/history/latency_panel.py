"""The run plot's latency panel (`dht.history.plot`): one point per operation at (invoke
time, latency), latency on a log scale, coloured by outcome (ok, 503, 504, no answer,
other) and shaped by kind (PUT, GET, DELETE), with its two legends.

An operation that got no answer is drawn at the client's time-out, so time-outs form a
band along the top. The operations the checker blamed (a lost write, a stale read, a GET
that saw a dead value or one from nowhere) are ringed. The outcome colours are the
throughput panel's too, so one legend serves both.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator

from dht.history.operation import Kind, Op
from dht.history.run import Run, outcome
from dht.history.verdict import Phantom, Report, Resurrection, read_source

OUTCOME_COLOURS = {
    "ok": "#2c7fb8",
    "503": "#fd8d3c",
    "504": "#d7191c",
    "timeout": "#252525",
}
OTHER_COLOUR = "#7b3294"
MARKERS = {Kind.PUT: "o", Kind.GET: "^", Kind.DELETE: "s"}
# Used when the run does not say (`details["client_timeout"]`, seconds).
DEFAULT_TIMEOUT_MS = 1000.0
FLOOR_MS = 0.01  # latencies are drawn at least this high on the log scale


@dataclass(frozen=True)
class Points:
    """The operations as plotted: times since the origin, latencies in ms."""

    start: np.ndarray
    latency: np.ndarray
    outcome: list[str]
    kind: list[Kind]


def outcome_colour(name: str) -> str:
    return OUTCOME_COLOURS.get(name, OTHER_COLOUR)


def outcome_order(names: Sequence[str]) -> list[str]:
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


def points_of(ops: Sequence[Op], origin: float, timeout_ms: float) -> Points:
    """`ops` as plotted: seconds since `origin`, and latency, `timeout_ms` without an
    answer."""
    start = np.array([op.invoked - origin for op in ops], dtype=float)
    latency = np.array(
        [
            timeout_ms if op.completed is None else (op.completed - op.invoked) * 1000.0
            for op in ops
        ],
        dtype=float,
    )
    return Points(
        start,
        np.maximum(latency, FLOOR_MS),
        [outcome(op.status) for op in ops],
        [op.kind for op in ops],
    )


def draw_latency(
    top: Axes, run: Run, report: Report, points: Points, origin: float, timeout_ms: float
) -> None:
    """The panel: the points, the client's time-out as a dashed line, the rings round
    what the checker blamed, and the legends of outcomes and kinds right of it."""
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
    rings = _ring(top, run, report, origin, timeout_ms)
    _legends(top, points, names, rings)


def _scatter(top: Axes, points: Points) -> list[str]:
    """The latency points, a group per (outcome, kind); returns the outcomes drawn."""
    names = outcome_order(points.outcome)
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
                color=outcome_colour(name),
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
    # Such a report names its GET by key, value and `read_source`.
    sources = {(item.key, item.value, item.source) for item in seen if not item.in_final_state}
    if sources:
        blamed["read of a dead or unknown value"] = [
            op
            for op in run.history
            if op.kind is Kind.GET and (op.key, op.value, read_source(op)) in sources
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
        points = points_of(ops, origin, timeout_ms)
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


def _legends(top: Axes, points: Points, names: Sequence[str], rings: list[Line2D]) -> None:
    """The outcomes drawn and the rings' entries (with counts) above, the kinds below,
    right of the panel."""
    counts = Counter(points.outcome)
    outcome_handles: list[Line2D | Patch] = [
        Line2D(
            [],
            [],
            marker="o",
            linestyle="-",
            linewidth=1.2,
            color=outcome_colour(name),
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
    legend = top.legend(
        handles=outcome_handles + rings,
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
