"""The faults as the run plot (`dht.history.plot`) shows them: a track above the panels with
one bar per fault over its window, labelled at the time it ran; the same windows shaded
across the panels; and a legend with one colour per kind of fault ("cut links into",
whatever node it hit).

The labels are packed into at most MAX_ROWS rows: whole if they fit, else cut to their
first word and node, else numbered in order.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from dht.history.run import FaultWindow

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


def fault_labels(
    figure: Figure,
    faults: Sequence[FaultWindow],
    origin: float,
    span: tuple[float, float],
    panel_px: float,
) -> tuple[list[str], list[int], list[float]]:
    """The labels for the fault track, their rows and where they start (seconds): the
    whole labels if they fit in MAX_ROWS rows, else short ones (first word and node),
    else numbers in order. `panel_px` is the panels' width in pixels, over which `span`
    is drawn. A label that would run off the right edge starts earlier."""
    if not faults:
        return [], [], []
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


def shade(axes: Sequence[Axes], faults: Sequence[FaultWindow], origin: float) -> None:
    """Shades every fault's window across `axes`, in its kind's colour."""
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


def draw_track(
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


def fault_legend(axis: Axes, faults: Sequence[FaultWindow]) -> None:
    """The kinds of fault, their colours and how many of each, right of `axis`; nothing
    for a run without faults."""
    if not faults:
        return
    kinds = Counter(fault_kind(fault.label) for fault in faults)
    colours = _fault_colours(faults)
    axis.legend(
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
