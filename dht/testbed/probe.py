"""The cockpit's probe load: a few requests a second of its own, spread over the nodes,
for two uses. For nodes without `/metrics` (another implementation of the API), the page
shows request rate, error rate and p99 as the probe saw them; and a recorded experiment
is the probe's history while recording, judged by the history checker when it stops.

Each operation goes straight to one node (chosen at random), on one of a few keys
(`cockpit-probe-00`...), at the node's default `replicas`: PUTs with a value no other
operation sends (so a value read names its write), DELETEs and GETs. Every operation is
recorded as a `dht.history.operation.Op` on the monotonic clock. A recording switches to
keys of its own (`cockpit-<stamp>-00`...), never written before it: the checker must
know every write a value read can come from.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp

from dht.history.operation import Kind, Op, Window

log = logging.getLogger("dht.testbed.cockpit")

KEY_COUNT = 16
KEYS = tuple(f"cockpit-probe-{index:02d}" for index in range(KEY_COUNT))
# The page's figures are over this many seconds: at a few requests a second per node, a
# one-second window would hold one or two samples.
WINDOW = 10.0
# A node that has not answered within this is a time-out, as a client would see it.
TIMEOUT = 5.0
# Operations waiting for an answer at once, at most: a paused node holds every request
# sent to it until the time-out, and the probe must not pile them up.
MAX_IN_FLIGHT = 64
# A recording keeps at most this many operations (an hour at 25 a second); past it the
# oldest are dropped, and the experiment says so.
MAX_RECORDED = 90_000
# How long the final reads retry after the recording stops (a breaker may be open, a
# node restarting).
FINAL_READ_DEADLINE = 10.0
# One final read's wait for one node: the other nodes are tried next.
FINAL_READ_TIMEOUT = 1.0


@dataclass(frozen=True)
class Mix:
    put: float = 0.5
    delete: float = 0.1  # the rest are GETs


@dataclass(frozen=True)
class Sample:
    completed: float
    seconds: float
    failed: bool  # no answer, or a 5xx


class Probe:
    def __init__(
        self,
        nodes: list[str],
        rate: float,
        mix: Mix = Mix(),
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nodes = nodes
        self.rate = rate
        self.mix = mix
        self._random = random.Random(seed)
        self._clock = clock
        self._samples: list[deque[Sample]] = [deque() for _ in nodes]
        self._in_flight: set[asyncio.Task[None]] = set()
        self._sequence = 0
        self._writer = secrets.token_hex(3)  # in every value: unique across cockpit runs
        self.keys = KEYS
        self._recording_keys: frozenset[str] = frozenset()
        self._recordings = 0
        self._recorded: deque[Op] | None = None
        self.dropped = 0  # recorded operations dropped past MAX_RECORDED
        self.skipped = 0  # ticks with MAX_IN_FLIGHT operations waiting

    # -- the load -------------------------------------------------------------------------

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Sends `rate` operations a second until cancelled (never if the rate is 0)."""
        if self.rate <= 0:
            return
        interval = 1.0 / self.rate
        next_at = self._clock()
        try:
            while True:
                if len(self._in_flight) < MAX_IN_FLIGHT:
                    task = asyncio.create_task(self._one(session))
                    self._in_flight.add(task)
                    task.add_done_callback(self._in_flight.discard)
                else:
                    self.skipped += 1
                next_at = max(next_at + interval, self._clock() - 1.0)
                await asyncio.sleep(max(0.0, next_at - self._clock()))
        finally:
            for task in list(self._in_flight):
                task.cancel()
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _one(self, session: aiohttp.ClientSession) -> None:
        index = self._random.randrange(len(self.nodes))
        key = self._random.choice(self.keys)
        draw = self._random.random()
        value: bytes | None = None
        if draw < self.mix.put:
            self._sequence += 1
            kind, value = Kind.PUT, f"cockpit-{self._writer}-{self._sequence}".encode()
        elif draw < self.mix.put + self.mix.delete:
            kind = Kind.DELETE
        else:
            kind = Kind.GET
        invoked = self._clock()
        op = await send(session, self.nodes[index], kind, key, value, self._clock, index)
        self._note(index, invoked, op)

    def _note(self, index: int, invoked: float, op: Op | None) -> None:
        """`op` None: the node refused the connection, so the operation never reached
        it: a failure for the figures, and nothing the history needs (recorded as "no
        answer", a refused write would be one that may take effect at any time, and
        could explain away a lost write)."""
        now = self._clock()
        failed = op is None or op.status is None or op.status >= 500
        seconds = (now if op is None or op.completed is None else op.completed) - invoked
        samples = self._samples[index]
        samples.append(Sample(now, seconds, failed))
        while samples and samples[0].completed < now - WINDOW:
            samples.popleft()
        if op is not None and self._recorded is not None and op.key in self._recording_keys:
            if len(self._recorded) == MAX_RECORDED:
                self.dropped += 1
            self._recorded.append(op)

    # -- what the page shows --------------------------------------------------------------

    def stats(self) -> list[dict[str, float | int | None]]:
        """Per node, over the last WINDOW seconds: answers a second, failures (no answer
        or 5xx) a second, and the p99 of the time to answer in seconds."""
        now = self._clock()
        figures = []
        for samples in self._samples:
            recent = [sample for sample in samples if sample.completed >= now - WINDOW]
            times = sorted(sample.seconds for sample in recent)
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))] if times else None
            figures.append(
                {
                    "count": len(recent),
                    "rate": len(recent) / WINDOW,
                    "error_rate": sum(sample.failed for sample in recent) / WINDOW,
                    "p99": p99,
                }
            )
        return figures

    # -- recording ------------------------------------------------------------------------

    @property
    def recording(self) -> bool:
        return self._recorded is not None

    def record(self) -> None:
        """From now on, operations go to keys of the recording's own, never written
        before it (the checker must know every write a value read can come from), and
        are kept."""
        self._recordings += 1
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{self._writer}-{self._recordings}"
        self.keys = tuple(f"cockpit-{stamp}-{index:02d}" for index in range(KEY_COUNT))
        self._recording_keys = frozenset(self.keys)
        self._recorded = deque(maxlen=MAX_RECORDED)
        self.dropped = 0

    async def recorded(self) -> list[Op]:
        """Stops recording and returns every operation recorded, in invoke order. New
        operations go back to the probe's own keys at once; the ones in flight on the
        recording's keys are waited for (each ends by TIMEOUT), so none of them can land
        unrecorded before the final reads."""
        self.keys = KEYS
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=TIMEOUT + 1.0)
        ops = sorted(self._recorded or (), key=lambda op: op.invoked)
        self._recorded = None
        self._recording_keys = frozenset()
        return ops

    async def final_state(
        self, session: aiohttp.ClientSession, keys: set[str]
    ) -> tuple[dict[str, bytes | None], dict[str, Window], list[str]]:
        """A GET of each key until a node answers 200 or 404: the value or None, when
        that read ran, and the keys no node answered for. Each key is tried on every
        node (FINAL_READ_TIMEOUT each, so a paused node costs a second), and tried again
        while FINAL_READ_DEADLINE lasts; a node that did not answer is asked last.

        The first tries read every node (`replicas=N/N`, the newest wins): the state the
        cluster converges to, even while a write is on one replica only (a lost disk's
        peers not repaired yet), where a quorum read taken at once could miss it and
        call it lost. With a node down that read fails, and the node's default is read."""
        final: dict[str, bytes | None] = {}
        final_at: dict[str, Window] = {}
        unread = []
        deadline = self._clock() + FINAL_READ_DEADLINE
        silent: set[int] = set()  # nodes that did not answer a final read
        for key in sorted(keys):
            read = False
            everyone: str | None = f"{len(self.nodes)}/{len(self.nodes)}"
            while not read:
                order = sorted(range(len(self.nodes)), key=lambda index: index in silent)
                for index in order:
                    op = await send(
                        session,
                        self.nodes[index],
                        Kind.GET,
                        key,
                        None,
                        self._clock,
                        index,
                        FINAL_READ_TIMEOUT,
                        everyone,
                    )
                    if op is not None and op.status in (200, 404) and op.completed is not None:
                        final[key] = op.value
                        final_at[key] = (op.invoked, op.completed)
                        silent.discard(index)
                        read = True
                        break
                    silent.add(index)
                if not read and everyone is not None:
                    everyone = None  # a node is down: its default replicas then
                    continue
                if not read and self._clock() >= deadline:
                    unread.append(key)
                    break
                if not read:
                    await asyncio.sleep(0.2)
        return final, final_at, unread


async def send(
    session: aiohttp.ClientSession,
    node: str,
    kind: Kind,
    key: str,
    value: bytes | None,
    clock: Callable[[], float],
    index: int,
    wait: float = TIMEOUT,
    replicas: str | None = None,
) -> Op | None:
    """One operation on `node`, recorded; no answer within `wait` seconds (or a connection
    lost) is recorded with no status and no completion: it may take effect later. None
    when the node refused the connection: the request never left."""
    url = f"{node}/v0/entity?id={quote(key, safe='')}"
    if replicas is not None:
        url += f"&replicas={replicas}"
    name = f"node{index + 1}"
    invoked = clock()
    try:
        async with session.request(
            kind.value, url, data=value, timeout=aiohttp.ClientTimeout(total=wait)
        ) as response:
            body = await response.read()
            status = response.status
    except aiohttp.ClientConnectorError:
        return None
    except (TimeoutError, aiohttp.ClientError, OSError):
        return Op(kind, key, value, invoked, None, None, None, name, replicas)
    completed = clock()
    if kind is Kind.GET:
        value = body if status == 200 else None
    return Op(kind, key, value, invoked, completed, status, None, name, replicas)
