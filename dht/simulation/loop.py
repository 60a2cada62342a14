"""An asyncio event loop on virtual time, with one owner per callback.

Time stands still while callbacks run and jumps to the next timer when none is ready,
so a simulated hour costs only the callbacks it runs. Every callback carries the
`contextvars.Context` it was scheduled in (asyncio copies it for tasks, timers and
future callbacks); the simulator runs each node's code in a context naming the node's
`Incarnation`, so the loop can hold a paused node's callbacks until it resumes (as
SIGSTOP would) and drop a crashed one's for good (as kill -9 would), with no hook in the
node's code. Clients and the simulator itself run in contexts with no incarnation.

No global is replaced: each node is given a `Machine` (`VirtualClocks.machine`) whose
monotonic clock is the loop's time and whose wall clock is virtual time plus that
node's offset, so it reads its own, possibly skewed or stepped, clock wherever its code
reads one; its randomness (the channel's nonces) draws from the seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import heapq
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dht.model.machine import Machine

# The incarnation whose code a callback runs (None: a client or the simulator).
OWNER: contextvars.ContextVar[Incarnation | None] = contextvars.ContextVar(
    "dht_simulation_owner", default=None
)

# Where virtual time starts, on the wall clock's scale (2026-01-01 UTC): versions and
# digests look like those of a real node.
EPOCH = 1_767_225_600.0


@dataclass(eq=False)
class Incarnation:
    """One run of one node's process, from its start to its crash or stop."""

    name: str
    number: int
    clock_offset: float = 0.0  # seconds the node's wall clock is ahead of true time
    paused: bool = False
    dead: bool = False
    held: list[asyncio.Handle] = field(default_factory=list)

    def context(self) -> contextvars.Context:
        context = contextvars.copy_context()
        context.run(OWNER.set, self)
        return context


class Stalled(Exception):
    """Nothing is ready and no timer is left: the simulation can never go on."""


class VirtualLoop(asyncio.BaseEventLoop):
    """A loop with no selector: no sockets, no threads, no real clock. Handles run in the
    order asyncio would run them (ready FIFO, timers by deadline then by scheduling
    order), so a seed and a commit give one schedule."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        self._clock_resolution = 0.0
        self.handles_run = 0
        self.network: Any = None  # dht.simulation.network.Network, for create_connection
        # The tasks of crashed incarnations, held until the run ends: collected during it,
        # their coroutines' `finally` clauses would run at a moment the garbage collector
        # picks, not the schedule.
        self.graveyard: list[asyncio.Task[Any]] = []

    async def create_connection(  # type: ignore[override]
        self, protocol_factory: Callable[[], asyncio.Protocol], host: str, port: int, **_: Any
    ) -> tuple[asyncio.Transport, asyncio.Protocol]:
        """A connection over the simulated network, from the node whose code dials."""
        owner = OWNER.get()
        assert owner is not None and self.network is not None, "only nodes dial"
        transport, protocol = await self.network.connect(owner.name, port, protocol_factory)
        return transport, protocol

    def time(self) -> float:
        return self._now

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> Any:  # type: ignore[override]
        """`asyncio.to_thread` (the handoff counts its records in a thread): run here, at
        once, in virtual time; a thread would end at a moment no seed decides."""
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def _write_to_self(self) -> None:
        """`call_soon_threadsafe` wakes a selector; this loop has none to wake."""

    def _process_events(self, event_list: Any) -> None:
        """No I/O: the network is callbacks on this loop."""

    def bury(self, incarnation: Incarnation) -> None:
        """`incarnation` crashed: none of its callbacks runs again, and its tasks wait,
        unfinished, for the end of the run (`forget_the_dead`)."""
        incarnation.dead = True
        incarnation.held.clear()
        self.graveyard.extend(asyncio.all_tasks(self))

    def forget_the_dead(self) -> None:
        """After the run, before the loop closes: the crashed incarnations' coroutines are
        closed one by one, each as if its task were cancelled where it waits (their
        `finally` clauses run now, their complaints ignored: the verdict is made), then
        dropped. Left to the garbage collector, CPython 3.11 closed some of them midway
        through a collection and crashed (a segmentation fault in `gc.collect`)."""
        hook = sys.unraisablehook
        sys.unraisablehook = lambda _: None
        try:
            for task in self.graveyard:
                if not task.done():
                    with contextlib.suppress(Exception):
                        task.get_coro().close()
            self.graveyard.clear()
            gc.collect()
        finally:
            sys.unraisablehook = hook

    def pause(self, incarnation: Incarnation) -> None:
        incarnation.paused = True

    def resume(self, incarnation: Incarnation) -> None:
        incarnation.paused = False
        held, incarnation.held = incarnation.held, []
        self._ready.extend(held)  # type: ignore[attr-defined]

    def _run_once(self) -> None:
        ready = self._ready  # type: ignore[attr-defined]
        scheduled = self._scheduled  # type: ignore[attr-defined]
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
            heapq.heappop(scheduled)._scheduled = False
        if not ready:
            if self._stopping:  # type: ignore[attr-defined]
                return
            if not scheduled:
                raise Stalled("no callback is ready and no timer is set")
            self._now = max(self._now, scheduled[0]._when)
        now = self._now
        while scheduled and scheduled[0]._when <= now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            ready.append(handle)
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            owner = handle._context.get(OWNER)
            if owner is not None and (owner.dead or owner.paused):
                if not owner.dead:
                    owner.held.append(handle)
                continue
            self.handles_run += 1
            handle._run()


class VirtualClocks:
    """The clocks and randomness each simulated node is given (`machine`), in place of
    the system's: the loop's virtual time, and bytes drawn from the seed."""

    def __init__(self, loop: VirtualLoop, seed: int) -> None:
        self._loop = loop
        # One stream for every node: the order of the draws is the run's, as the bytes
        # they give cross the network (nonces), and the trace covers them.
        self._random = random.Random(f"urandom-{seed}")

    def machine(self, incarnation: Incarnation) -> Machine:
        """What one run of a node reads: monotonic time is the loop's, the wall clock
        virtual time plus the incarnation's offset (which clock faults move)."""
        loop = self._loop

        def wall() -> float:
            return EPOCH + loop.time() + incarnation.clock_offset

        return Machine(
            monotonic=loop.time,
            monotonic_ns=lambda: round(loop.time() * 1e9),
            wall=wall,
            wall_ns=lambda: round(wall() * 1e9),
            random_bytes=self._random.randbytes,
        )
