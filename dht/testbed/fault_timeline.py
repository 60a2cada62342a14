"""The cockpit's fault timeline: every fault a person applies (kill -9, pause, wipe,
restart, cut or slow link, ...) and every node exit the cluster saw, with when it began
and when it was healed, kept in memory by the cockpit and shown on its page. A recorded
experiment takes its fault windows from here, so the plot shades what was done.

Pure: times come from the clocks passed in (the monotonic one, which the probe's
history shares, and the wall one, which the page shows).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dht.history.run import FaultWindow

# Faults kept: past this many, the oldest that has ended is forgotten (one still lasting
# never is, so a fault is never healed by forgetting it).
KEPT_EVENTS = 1000


@dataclass
class FaultEvent:
    """One fault: `key` says what heals it (a restart of node2 ends "process:node2"),
    `kind` is "process" or "link", times are on the timeline's monotonic clock, `ended`
    is None while it lasts."""

    key: str
    label: str
    kind: str
    started: float
    started_wall: float
    ended: float | None = None


class FaultTimeline:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        kept: int = KEPT_EVENTS,
    ) -> None:
        self._clock = clock
        self._wall = wall
        self._kept = kept
        self._events: list[FaultEvent] = []

    def begin(self, key: str, label: str, kind: str) -> None:
        """A fault under `key` begins, unless one under it lasts already (a second cut
        of a cut link changes nothing)."""
        if self.is_open(key):
            return
        self._add(FaultEvent(key, label, kind, self._clock(), self._wall()))

    def _add(self, event: FaultEvent) -> None:
        self._events.append(event)
        if len(self._events) > self._kept:
            ended = next((i for i, e in enumerate(self._events) if e.ended is not None), 0)
            del self._events[ended]

    def end(self, key: str) -> None:
        """Heals the fault under `key`, if one lasts."""
        now = self._clock()
        for event in self._events:
            if event.key == key and event.ended is None:
                event.ended = now

    def end_all(self, prefix: str) -> None:
        """Heals every lasting fault whose key starts with `prefix` ("link:" on a reset)."""
        now = self._clock()
        for event in self._events:
            if event.key.startswith(prefix) and event.ended is None:
                event.ended = now

    def instant(self, key: str, label: str, kind: str, seconds: float) -> None:
        """A fault that is over already, such as a restart that took `seconds`."""
        now = self._clock()
        self._add(FaultEvent(key, label, kind, now - seconds, self._wall() - seconds, now))

    def is_open(self, key: str) -> bool:
        return any(event.key == key and event.ended is None for event in self._events)

    def events(self) -> list[FaultEvent]:
        return list(self._events)

    def windows(self, since: float, until: float) -> list[FaultWindow]:
        """The faults that overlap [since, until], a lasting one ending at `until`: what
        a recorded experiment shades."""
        windows = []
        for event in self._events:
            end = until if event.ended is None else min(event.ended, until)
            if event.started <= until and end >= since:
                windows.append(FaultWindow(event.label, event.started, end))
        return windows

    def as_json(self) -> list[dict[str, Any]]:
        """Newest first, for the page: what, which kind, when it began (Unix seconds),
        how long it lasted or lasts so far, and whether it still does."""
        now = self._clock()
        return [
            {
                "label": event.label,
                "kind": event.kind,
                "started": event.started_wall,
                "seconds": round((now if event.ended is None else event.ended) - event.started, 3),
                "ongoing": event.ended is None,
            }
            for event in reversed(self._events)
        ]
