"""What both ends of a replica channel share (`dht.transport.channel` is the client
end, `dht.transport.channel_server` the server end): the codec of
`dht.transport.protocol`, and writes batched per loop iteration.

Large messages are cut into fragments (`FRAGMENT_BYTES`); complete small frames are
always written before the next fragment, and fragments enter the transport only while
it is below its high-water mark, so a 16 MiB value never holds small calls behind it.
A large record the server answers with is weighed against the node's byte budget until
its last fragment is written out; past the budget the call is declined instead. A large
write the client gave up on (its deadline passed) is dropped if none of it has left;
if some has, the replica needs the rest to finish the message, so it goes on, and the
budget counts the value it pins until the last fragment is out.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import cast

from dht.limits import WRITE_HIGH_WATER
from dht.transport.messages import Answer, Handshake, Request
from dht.transport.protocol import Budget, Frame, ReplicaCodec


@dataclass(slots=True, eq=False)
class _Outgoing:
    """A large message on its way out, fragment by fragment. Its value stays in memory
    (the fragments are views of it) until the last fragment is written; `charged` says
    the byte budget counts its `size` until then."""

    call_id: int
    fragments: deque[Frame]
    size: int
    started: bool = False  # a fragment of it has been written
    charged: bool = False


class Connection(asyncio.Protocol):
    """What both ends share: a codec, and writes batched per loop iteration with large
    messages fed in fragments behind the small ones."""

    def __init__(self, codec: ReplicaCodec, budget: Budget | None = None) -> None:
        self.codec = codec
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_received = 0.0
        # Loop time a fragment of a large message last entered the transport: it takes
        # one only below its high-water mark, so the peer was reading then (`stalled`).
        self.last_sent = 0.0
        self._budget = budget
        self._urgent: list[bytes | memoryview] = []
        self._bulk: deque[_Outgoing] = deque()
        self._sending: dict[int, _Outgoing] = {}  # the bulk by call id
        self._flush_scheduled = False
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._urgent.clear()
        unsent, self._bulk = self._bulk, deque()
        self._sending.clear()
        for message in unsent:
            self._let_go(message)

    def send(self, event: Handshake | Request | Answer, weighed: bool = False) -> bool:
        """Queues `event`; it leaves with everything else queued in this loop iteration.
        `weighed`: a large message is admitted against the byte budget first, and holds
        its bytes until written out; False (nothing queued) when the budget refuses."""
        frames = self.codec.send(event)
        if len(frames) == 1:
            self._urgent.extend(frames[0])
        else:
            call_id = cast(Request | Answer, event).call_id  # a handshake is one frame
            size = sum(len(part) for frame in frames for part in frame)
            message = _Outgoing(call_id, deque(frames), size)
            if weighed and self._budget is not None:
                if not self._budget.acquire(size):
                    return False
                message.charged = True
            self._bulk.append(message)
            self._sending[call_id] = message
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)
        return True

    def has_unsent(self) -> bool:
        """Whether queued frames have not all been handed to the transport yet."""
        return bool(self._urgent or self._bulk)

    def flush(self) -> None:
        self._flush_scheduled = False
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._urgent:
            transport.writelines(self._urgent)
            self._urgent = []
        bulk = self._bulk
        if bulk and not self._paused:
            self.last_sent = asyncio.get_running_loop().time()
        while bulk and not self._paused:
            message = bulk[0]
            transport.writelines(message.fragments.popleft())
            message.started = True
            if message.fragments:
                bulk.rotate(-1)  # round robin between large messages
            else:
                self._let_go(bulk.popleft())

    def abandon(self, call_id: int) -> None:
        """No one waits for call `call_id` any more: its large message, if one is still
        queued, is dropped when none of it has left; else the rest must follow (the
        peer needs the whole message), and the budget counts it until it has."""
        message = self._sending.get(call_id)
        if message is None:
            return
        if not message.started:
            self._bulk.remove(message)
            self._let_go(message)
        elif not message.charged and self._budget is not None:
            self._budget.hold(message.size)
            message.charged = True

    def stalled(self, call_id: int, since: float) -> bool:
        """Whether call `call_id`'s large message has fragments still to write while no
        fragment of any message was written since `since` (loop time)."""
        return call_id in self._sending and self.last_sent < since

    def _let_go(self, message: _Outgoing) -> None:
        """`message` is written out, or never will be: the budget has its bytes back."""
        if self._sending.get(message.call_id) is message:
            del self._sending[message.call_id]
        if message.charged and self._budget is not None:
            message.charged = False
            self._budget.release(message.size)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self.flush()

    def abort(self) -> None:
        self.closed = True  # no new calls on it, even before connection_lost
        if self.transport is not None:
            self.transport.abort()
