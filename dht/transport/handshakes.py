"""Replica channel connections that have not said HELLO yet: few, and not for long.

Until its HELLO is admitted a connection is a stranger's (anyone who reaches the port can
open one), so the node bounds what strangers can hold: each gets `deadline` seconds to
present its HELLO, and at most `limit` of them wait at once. One more closes the oldest
rather than the newcomer: a true peer says HELLO within a round trip of connecting, so
a crowd of silent connections cannot keep it out by sitting on every slot.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from dht.limits import HANDSHAKE_DEADLINE, MAX_AWAITING_HELLO
from dht.model.log_limits import RateLimitedLog


class Stranger(Protocol):
    """A connection awaiting its HELLO, as far as this module cares."""

    @property
    def peer(self) -> str:
        """Where it comes from, for the log."""

    def abort(self) -> None: ...


class Handshakes:
    """The connections awaiting their HELLO, each with its deadline's timer."""

    def __init__(
        self,
        log: RateLimitedLog,
        limit: int = MAX_AWAITING_HELLO,
        deadline: float = HANDSHAKE_DEADLINE,
    ) -> None:
        self._log = log
        self._limit = limit
        self._deadline = deadline
        self._waiting: dict[Stranger, asyncio.TimerHandle] = {}  # oldest first

    def __len__(self) -> int:
        return len(self._waiting)

    def begin(self, connection: Stranger) -> None:
        """`connection` starts waiting for its HELLO; past the limit, the oldest of the
        others is closed."""
        while len(self._waiting) >= self._limit:
            oldest = next(iter(self._waiting))
            self._log.warning(
                "handshake-crowd",
                "%d replica channel connections await their HELLO: closing the oldest, from %s",
                len(self._waiting),
                oldest.peer,
            )
            self.end(oldest)
            oldest.abort()
        loop = asyncio.get_running_loop()
        self._waiting[connection] = loop.call_later(self._deadline, self._expired, connection)

    def end(self, connection: Stranger) -> None:
        """`connection` said HELLO (or closed): it waits no more."""
        timer = self._waiting.pop(connection, None)
        if timer is not None:
            timer.cancel()

    def _expired(self, connection: Stranger) -> None:
        if self._waiting.pop(connection, None) is None:
            return
        self._log.warning(
            "handshake-deadline",
            "replica channel from %s sent no HELLO within %g s: closing it",
            connection.peer,
            self._deadline,
        )
        connection.abort()
