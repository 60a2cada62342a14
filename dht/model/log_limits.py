"""Log lines that a flood of the same event cannot multiply: the first of a kind within
`interval` seconds is logged, the others are counted, and the next line of that kind
after the interval says how many were held back.

`QuietMalformedHttp` applies this to aiohttp's server log, which reports every malformed
request (a bad Content-Length, a 9 KB header, a TLS hello on the HTTP port) as an ERROR
with a traceback: a way for any client to fill the disk. Such a request already got its
400; it is worth one short INFO line per kind, not a traceback each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp.http_exceptions import HttpProcessingError


@dataclass(slots=True)
class _Kind:
    logged_at: float
    held_back: int = 0


class RateLimit:
    """Per kind of event: `admit` says whether to log this one, and how many of its kind
    were held back since the last one logged (None: hold this one back too)."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self._interval = interval
        self._clock = clock
        self._kinds: dict[str, _Kind] = {}

    def admit(self, kind: str) -> int | None:
        now = self._clock()
        seen = self._kinds.get(kind)
        if seen is not None and now - seen.logged_at < self._interval:
            seen.held_back += 1
            return None
        self._kinds[kind] = _Kind(now)
        return 0 if seen is None else seen.held_back


def _held_back_note(count: int) -> str:
    return f" ({count} more like it not logged)" if count else ""


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, limit: RateLimit | None = None) -> None:
        self._logger = logger
        self._limit = limit or RateLimit()

    def warning(self, kind: str, message: str, *args: object) -> None:
        self.log(logging.WARNING, kind, message, *args)

    def info(self, kind: str, message: str, *args: object) -> None:
        self.log(logging.INFO, kind, message, *args)

    def log(self, level: int, kind: str, message: str, *args: object) -> None:
        held_back = self._limit.admit(kind)
        if held_back is not None:
            self._logger.log(level, message + "%s", *args, _held_back_note(held_back))


class QuietMalformedHttp(logging.Filter):
    """Rewrites aiohttp's record of a malformed request into one short INFO line per
    kind per interval; any other exception keeps its traceback."""

    def __init__(self, limit: RateLimit | None = None) -> None:
        super().__init__()
        self._limit = limit or RateLimit()

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError):
            return True
        kind = type(error).__name__
        held_back = self._limit.admit(kind)
        if held_back is None:
            return False
        reason = " ".join(str(error.message).split())[:120]
        record.msg = "malformed HTTP request answered 400 (%s: %s)%s"
        record.args = (kind, reason, _held_back_note(held_back))
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.exc_info, record.exc_text = None, None
        return True
