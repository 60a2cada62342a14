"""One call to a peer on its replica channel, from its request to its outcome: the
deadline (`--timeout`, plus the transfer time of a large request or answer, or of every
large write queued to the peer with it), the answer's reading into a result, a large
write sent again when the peer's byte budget declined it, and what the peer's breaker
and metrics are told."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from dht.limits import PLAIN_CALL_BYTES, SLOWEST_TRANSFER
from dht.model.machine import Machine
from dht.model.record import Record
from dht.transport.breaker import Breaker
from dht.transport.channel import PeerError, ReplicaChannel, ReplicaFull
from dht.transport.messages import (
    Answer,
    Failed,
    RecordAbsent,
    RecordFound,
    Request,
    Stored,
    Why,
)

T = TypeVar("T")


class VersionRefused(PeerError):
    """The peer declined a record whose version is too far ahead of its clock (rule 8.4):
    a verdict on that record, not on the peer, so a caller with other records to send
    goes on with them."""


class CallOwner(Protocol):
    """The peer a call goes to (`dht.transport.peers.Peer`)."""

    url: str
    timeout: float
    channel: ReplicaChannel
    breaker: Breaker
    # Bytes of the large requests sent to it so far, of those not settled yet, and of
    # those among them declined and waiting to go again (not on their way).
    large_sent: int
    large_unsettled: int
    large_waiting: int
    closed: bool  # the node stopped talking to it (`Peer.close`)
    machine: Machine  # its calls are timed by `machine.monotonic`

    def after_large_settled(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once another large request to the peer has settled."""

    def observe_call(self, outcome: str, seconds: float | None) -> None: ...

    def succeeded(self, seconds: float) -> None: ...

    def failed(self, outcome: str, seconds: float | None) -> None: ...


def transfer_time(size: int) -> float:
    """Seconds added to the deadline of a call carrying `size` bytes, or answered with
    `size` bytes so far."""
    return size / SLOWEST_TRANSFER if size > PLAIN_CALL_BYTES else 0.0


def is_large(size: int) -> bool:
    """Whether a request of `size` bytes gets a deadline of its own (`PendingCall`)."""
    return size > PLAIN_CALL_BYTES


class PendingCall(Generic[T]):
    """One channel call in flight: settles its future once, from the first of the answer,
    the channel's failure, the deadline or the caller's cancellation, and records the
    outcome in the breaker. A time-out, a refused or reset connection, a refusal or a
    bad answer is a failure; a cancellation (no one needs the answer) is neither.

    Its deadline is `--timeout` after it was sent, plus the `transfer_time` of a large
    request, plus the `transfer_time` of the bytes of a large answer received by then
    (a read's answer may be a 16 MiB record, whose size nothing announces). Those bytes
    are counted only when the deadline comes, never per fragment: a small call costs
    what it always did, and a large answer moves to a timer of its own each time its
    bytes have earned it more time. So an answer begun within `--timeout` that keeps
    coming at the rate `transfer_time` assumes is never cut off, whatever its size; one
    that slows below it or stops fails once the deadline overtakes its bytes.

    A large request shares its connection with every other large request to the peer
    (their fragments take turns) and the peer writes them one after another, so its
    own size does not say when it can be answered; the bytes queued with it do (SPEC
    9.14). When its own deadline comes it waits on, up to `--timeout` plus the
    `transfer_time` of every large request to the peer that was pending when it was
    sent or was sent since (its own included), looking again every `--timeout`, unless
    the peer has stopped reading it: fragments of it still wait to leave and none of
    any message has left for `--timeout` (a paused or partitioned peer). The wait after
    its last fragment has left is not watched: a busy replica sends nothing while it
    writes the values queued before it, and the bytes bound how long that may take.

    A large write the peer declined for its byte budget (rule 7.7: the peer holds as
    many bytes as it takes) is sent again once another large request to the peer has
    settled, freeing that much there, or after `--timeout` when none is on its way, within
    the same deadline."""

    __slots__ = (
        "_call_id",
        "_deadline",
        "_declined",
        "_extra",
        "_is_probe",
        "_peer",
        "_queued_after",
        "_request_for",
        "_result",
        "_result_of",
        "_size",
        "_started",
        "_timer",
        "sent",
    )

    def __init__(
        self,
        peer: CallOwner,
        result: asyncio.Future[T],
        result_of: Callable[[Answer], T],
        is_probe: bool,
        sent: float,
        request_for: Callable[[int], Request],
        size: int = 0,
    ) -> None:
        """`size`: the bytes of a large request (`is_large`), 0 for any other."""
        self._peer = peer
        self._result = result
        self._result_of = result_of
        self._is_probe = is_probe
        self.sent = sent  # loop time; the peer's deadline sweep reads it
        self._started = peer.machine.monotonic()  # finer than uvloop's millisecond loop time
        self._size = size
        self._extra = transfer_time(size)  # a large request's own transfer time
        # Bytes of large requests to the peer settled before this one was sent (it is
        # counted in `large_sent` already): what came after them is queued with it.
        self._queued_after = peer.large_sent - peer.large_unsettled
        self._deadline = sent + peer.timeout + self._extra  # loop time, so far
        self._timer: asyncio.TimerHandle | None = None  # its own deadline, if it has one
        self._call_id: int | None = None  # known once the request is made
        # Kept, for a large request, until it settles: a declined one is sent again.
        self._request_for: Callable[[int], Request] | None = request_for
        self._declined: PeerError | None = None  # why it waits to be sent again
        result.add_done_callback(self._settled)
        peer.channel.call(self._request, self._answered)

    @property
    def settled(self) -> bool:
        return self._result.done()

    def _request(self, call_id: int) -> Request:
        """Makes the request when the channel sends it (at once, or once it is dialled),
        and learns the call's id. Only a large request can make it again (a declined
        write); the request itself (a PUT's value) is not kept."""
        self._call_id = call_id
        request_for = self._request_for
        if not self._size:
            self._request_for = None
        assert request_for is not None, "the channel makes each request once"
        return request_for(call_id)

    def time_itself(self, loop: asyncio.AbstractEventLoop) -> None:
        """Puts the call's deadline on a timer of its own, rather than the peer's sweep."""
        self._timer = loop.call_at(self._deadline, self.expire)

    def _answered(self, answer: Answer | PeerError) -> None:
        if self._result.done():
            return  # past its deadline, or cancelled: the answer is not wanted
        if isinstance(answer, PeerError):  # the connection failed: no answer came
            self._fail(answer, "error", None)
            return
        if self._size and isinstance(answer, Failed) and answer.why is Why.OVERLOADED:
            # Its id is spent (the refusal came after its last fragment): until it goes
            # again it has none, so no later `forget`, `received` or `stalled` can name
            # another call that a new connection gave the same id.
            self._call_id = None
            self._send_again_later(unexpected(answer))
            return
        seconds = self._peer.machine.monotonic() - self._started
        try:
            value = self._result_of(answer)
        except PeerError as error:
            self._fail(error, "error", seconds)
            return
        self._peer.succeeded(seconds)
        self._result.set_result(value)

    def _send_again_later(self, declined: PeerError) -> None:
        """The peer declined this large write for its byte budget: it goes again once
        another large request to the peer has settled (the peer has let go of that
        one's bytes, or this node of its claim on them), or after `--timeout` when no
        other is on its way then; its deadline runs on meanwhile. Writes declined and
        waiting like it are not on their way: none of them would settle to wake the
        others before their deadlines."""
        self._declined = declined
        peer = self._peer
        peer.large_waiting += self._size
        peer.after_large_settled(functools.partial(self._send_again, declined))
        asyncio.get_running_loop().call_later(
            peer.timeout, functools.partial(self._send_again_if_alone, declined)
        )

    def _send_again_if_alone(self, declined: PeerError) -> None:
        """`--timeout` after the refusal: it goes again if no other large request is on
        its way to the peer (none will settle to wake it), else looks again later."""
        if self._declined is not declined or self._result.done():
            return
        peer = self._peer
        if peer.large_unsettled > peer.large_waiting:
            asyncio.get_running_loop().call_later(
                peer.timeout, functools.partial(self._send_again_if_alone, declined)
            )
            return
        self._send_again(declined)

    def _send_again(self, declined: PeerError) -> None:
        if self._declined is not declined or self._result.done():
            return  # sent again already, or settled
        if self._peer.closed:  # on no connection, and never to be: the refusal stands
            self._fail(declined, "error", None)
            return
        self._declined = None
        self._peer.large_waiting -= self._size
        self._peer.channel.call(self._request, self._answered)

    def expire(self) -> None:
        """Its deadline came: it fails, unless bytes of its answer came meanwhile that
        earn it more time, or it is a large request queued with others to a peer that
        still reads it."""
        if self._result.done():
            return
        peer = self._peer
        loop = asyncio.get_running_loop()
        answer_time = transfer_time(peer.channel.received(self._call_id))
        deadline = self.sent + peer.timeout + self._extra + answer_time
        now = loop.time()
        if self._size and not peer.channel.stalled(self._call_id, now - peer.timeout):
            queued_with = peer.large_sent - self._queued_after
            queued = self.sent + peer.timeout + transfer_time(queued_with) + answer_time
            deadline = max(deadline, min(queued, now + peer.timeout))
        if deadline > self._deadline:
            self._deadline = deadline
            self.time_itself(loop)
            return
        peer.channel.forget(self._call_id)
        if self._declined is not None:  # it was waiting to go again: the refusal stands
            self._fail(self._declined, "error", None)
            return
        peer.channel.deadline_missed(self.sent)
        waited = self._deadline - self.sent
        self._fail(PeerError(f"{peer.url}: no answer within {waited:.3g}s"), "timeout", None)

    def _fail(self, error: PeerError, outcome: str, seconds: float | None) -> None:
        if not self._result.done():
            self._peer.failed(outcome, seconds)
            self._result.set_exception(error)

    def _settled(self, result: asyncio.Future[T]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._declined is not None:  # it waited to go again: it waits no more
            self._declined = None
            self._peer.large_waiting -= self._size
        if result.cancelled():
            self._peer.observe_call("cancelled", None)
            self._peer.channel.forget(self._call_id)
            if self._is_probe:
                self._peer.breaker.release_probe()


def record_of(answer: Answer) -> Record | None:
    if isinstance(answer, RecordFound):
        return answer.record
    if isinstance(answer, RecordAbsent):
        return None
    raise unexpected(answer)


def stored_of(answer: Answer) -> bool:
    if isinstance(answer, Stored):
        return answer.stored
    raise unexpected(answer)


def unexpected(answer: Answer) -> PeerError:
    if isinstance(answer, Failed):
        if answer.why is Why.NO_SPACE:
            return ReplicaFull(f"declined for lack of space: {answer.reason}")
        if answer.why is Why.VERSION_AHEAD:
            return VersionRefused(f"declined: {answer.reason}")
        return PeerError(f"declined: {answer.reason}")
    return PeerError(f"answered {type(answer).__name__}")
