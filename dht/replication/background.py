"""A background loop an object owns (STYLE.md: every task is owned): started once,
cancelled and awaited on close, so no task outlives the node or runs unobserved."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class OwnedTask:
    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._name = name
        self._run = run
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def close(self) -> None:
        """Cancels the loop and waits for it to end. A loop that had already died of an
        error is logged here, once, rather than raised into the node's shutdown."""
        if self._task is None:
            return
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s had stopped with an error", self._name)
