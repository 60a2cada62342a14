"""Log lines that a flood of the same event cannot multiply: the first of a kind is
logged, the rest within `interval` seconds are counted and summed up in one line when
the next of that kind comes after the interval."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Kind:
    logged_at: float
    suppressed: int = 0


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._kinds: dict[str, _Kind] = {}

    def warning(self, kind: str, message: str, *args: object) -> None:
        self.log(logging.WARNING, kind, message, *args)

    def info(self, kind: str, message: str, *args: object) -> None:
        self.log(logging.INFO, kind, message, *args)

    def log(self, level: int, kind: str, message: str, *args: object) -> None:
        now = self._clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen.logged_at < self._interval:
            seen.suppressed += 1
            return
        if seen is not None and seen.suppressed:
            message += " (and %d more like it in the last %.0fs)"
            args = (*args, seen.suppressed, now - seen.logged_at)
        self._kinds[kind] = _Kind(now)
        self._logger.log(level, message, *args)
