"""The group commit's writer: runs a batch's LevelDB write off the event loop, one batch
at a time, and tells the loop once it has landed.

`WriterThread` is one thread of its own, fed through a `queue.SimpleQueue` and answering
with `loop.call_soon_threadsafe`: a batch costs one put on the queue and one wake-up of
the loop. `loop.run_in_executor`, used before, cost more for each batch: a
`concurrent.futures.Future` with its lock and condition, the executor's lock, queue and
thread count check, an asyncio future chained to it and two callbacks between them, in
Python, on the loop's core (issue 51's profile found the executor's `submit` alone at
3.5 % of a one-node PUT's samples).

The simulator (`dht.simulation.disk.DelayedWriter`) gives its own writer: a batch lands
after a drawn latency of virtual time, on the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Protocol

# What a writer runs: the batch's write (raises what LevelDB raised), then, on the loop
# that handed it the batch, `landed` with the write's error or None.
Write = Callable[[], None]
Landed = Callable[[BaseException | None], None]


class BatchWriter(Protocol):
    def write(self, write: Write, landed: Landed) -> None:
        """Runs `write` off the loop, after the batches handed over before it, then calls
        `landed(error)` on the running loop (the caller's)."""

    def shutdown(self) -> None:
        """Returns once the batch under way (if any) has been written; takes no more."""


class WriterThread:
    """A `BatchWriter` on one thread, started with its first batch. A daemon thread: a
    process that ends without `Storage.close` acknowledged nothing of what it was still
    writing, so nothing is lost that was promised (LevelDB's log survives a write cut
    short, as it survives kill -9)."""

    def __init__(self, name: str = "leveldb-writer") -> None:
        self._name = name
        self._jobs: SimpleQueue[tuple[asyncio.AbstractEventLoop, Write, Landed] | None]
        self._jobs = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._shut = False

    def write(self, write: Write, landed: Landed) -> None:
        if self._shut:  # as an executor shut down does: the database may be closed
            raise RuntimeError("the LevelDB writer has been shut down")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._jobs.put((asyncio.get_running_loop(), write, landed))

    def shutdown(self) -> None:
        self._shut = True
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            _write_one(*job)
            # Nothing of the batch is held while the thread waits for the next: not its
            # values, nor the storage behind it (found by review: a job kept in this
            # frame kept a Storage dropped without close, and its LevelDB lock, alive).
            del job


def _write_one(loop: asyncio.AbstractEventLoop, write: Write, landed: Landed) -> None:
    error: BaseException | None = None
    try:
        write()
    except BaseException as exc:  # the batch's writes are failed with it, on the loop
        error = exc
    try:
        loop.call_soon_threadsafe(landed, error)
    except RuntimeError:
        pass  # the loop is closed: nobody waits for the answer any more
