"""The run plot's throughput panel (`dht.history.plot`): operations finished per second, per
outcome, in the latency panel's colours. An operation with no answer counts when the
client gave up on it, so a stall shows as fewer answers, then a burst of no answers.
"""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

from dht.history.latency_panel import outcome_colour, outcome_order
from dht.history.run import Run, outcome


def draw_throughput(
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
    for name in outcome_order(list(finished)):
        counts, _ = np.histogram(finished[name], bins=edges)
        rates = counts / width
        peak = max(peak, float(rates.max(initial=0.0)))
        bottom.stairs(
            rates,
            edges,
            color=outcome_colour(name),
            linewidth=1.3 if name == "ok" else 1.1,
            baseline=None,
            zorder=3,
        )
    bottom.set_yscale("symlog", linthresh=10.0, linscale=0.6)
    bottom.set_ylim(0.0, max(peak * 1.6, 20.0))
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    bottom.set_ylabel(f"finished, ops/s\n({width:g} s bins)")
    bottom.grid(True, axis="y", alpha=0.25, linewidth=0.6)
