"""The replica channel: one long-lived connection per peer that carries many record calls
at once, answers matched by call id (the asyncio half of `dht.transport.protocol`);
this is its client end, and `dht.transport.channel_server` its server end.

`ReplicaChannel` connects on first use and sends HELLO (protocol version, ring identity,
a fresh nonce); the peer proves it knows the cluster secret in its CHALLENGE, and this
end proves it in its PROOF, with the first calls right behind it
(`dht.transport.proof`: the secret itself never travels). Then every `get`/`put` is a
frame out and a frame back, no HTTP. Frames produced in one loop iteration leave in one write
(`dht.transport.connection`). A connection that closes, resets or answers garbage
fails all of its pending calls at once with `PeerError`; one that stays silent through a
call's whole deadline is aborted, which fails the rest at once too. The next call dials
again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

from dht.transport.connection import Connection
from dht.transport.messages import (
    Answer,
    Challenge,
    Failed,
    Hello,
    Proof,
    ProtocolError,
    RecordAbsent,
    RecordFound,
    Refused,
    RemoteTransportError,
    Request,
    Stored,
    Welcome,
)
from dht.transport.proof import Side, new_nonce, proof, proves
from dht.transport.protocol import Budget, ReplicaCodec, Role

log = logging.getLogger(__name__)

_LAST_CALL_ID = (1 << 32) - 1


class PeerError(RemoteTransportError):
    """A replica call to a peer failed (time-out, refused, reset, bad answer)."""


class ReplicaFull(PeerError):
    """The replica declined a write: its volume is below its free-space reserve."""


# Called once with a call's answer, or with the PeerError that ended it unanswered.
OnAnswer = Callable[["Answer | PeerError"], None]


class ClientConnection(Connection):
    """Calls may be sent right behind PROOF, before WELCOME comes back: a refused PROOF
    fails them all, and the server reads nothing after it. Opening a channel thus costs
    one round trip (HELLO, CHALLENGE) before the first call."""

    def __init__(
        self,
        peer: str,
        hello: Hello,
        secret: str | None,
        max_message_bytes: int,
        on_handshake: Callable[[str | None], None],
        budget: Budget | None = None,
        challenged: asyncio.Future[str | None] | None = None,
    ) -> None:
        """`hello` is the HELLO this connection sends (its nonce fresh); `budget`, when
        given, counts the large writes given up on midway until they have left
        (`abandon`); `challenged`, when given, gets None once this end sent its PROOF
        (calls may follow), or why the handshake ended before."""
        super().__init__(ReplicaCodec(Role.CLIENT, max_message_bytes), budget)
        self.peer = peer
        self.hello = hello
        self._secret = secret
        self._on_handshake = on_handshake
        self._challenged = challenged
        self._calls: dict[int, OnAnswer] = {}
        self._next_call = 0

    def call(self, request_for: Callable[[int], Request], on_answer: OnAnswer) -> int:
        """Sends one request; `on_answer` gets its answer. Returns the call id."""
        self._next_call = self._next_call % _LAST_CALL_ID + 1
        call_id = self._next_call
        self._calls[call_id] = on_answer
        self.send(request_for(call_id))
        return call_id

    def forget(self, call_id: int) -> None:
        """The caller no longer wants this call's answer (its deadline passed)."""
        self._calls.pop(call_id, None)
        self.abandon(call_id)

    def data_received(self, data: bytes) -> None:
        self.last_received = asyncio.get_running_loop().time()
        self.codec.receive_data(data)
        try:
            while (event := self.codec.next_event()) is not None:
                if isinstance(event, Challenge):
                    self._answer_challenge(event)
                elif isinstance(event, Welcome):
                    self._on_handshake(None)
                elif isinstance(event, Refused):
                    self._end_handshake(f"{self.peer} refused the replica channel: {event.reason}")
                elif isinstance(event, RecordFound | RecordAbsent | Stored | Failed):
                    on_answer = self._calls.pop(event.call_id, None)
                    if on_answer is not None:
                        on_answer(event)
        except ProtocolError as exc:
            log.warning("replica channel to %s sent garbage (%s): closing it", self.peer, exc)
            self.fail(PeerError(f"{self.peer}: protocol error: {exc}"))
            self.abort()

    def _answer_challenge(self, challenge: Challenge) -> None:
        """Checks the peer's proof of the secret; sends this end's if it holds."""
        hello = self.hello
        theirs = proof(
            self._secret, Side.SERVER, hello.nonce, challenge.nonce, hello.sender, hello.ring
        )
        if not proves(theirs, challenge.proof):
            self._end_handshake(
                f"{self.peer} could not prove the cluster secret: the nodes were started "
                "with different --secret values, or one without"
            )
            return
        ours = proof(
            self._secret, Side.CLIENT, hello.nonce, challenge.nonce, hello.sender, hello.ring
        )
        self.send(Proof(ours))
        self._challenge_answered(None)

    def _challenge_answered(self, failure: str | None) -> None:
        if self._challenged is not None and not self._challenged.done():
            self._challenged.set_result(failure)

    def _end_handshake(self, reason: str) -> None:
        self._on_handshake(reason)
        self._challenge_answered(reason)
        self.fail(PeerError(reason))
        self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        reason = f"{self.peer}: replica channel closed ({exc!r})"
        self._challenge_answered(reason)
        self.fail(PeerError(reason))

    def fail(self, error: PeerError) -> None:
        """Ends every pending call with `error`, at once."""
        calls, self._calls = self._calls, {}
        for on_answer in calls.values():
            on_answer(error)


class ReplicaChannel:
    """The channel to one peer, dialled on demand. Calls carry no deadline of their own:
    the caller (`dht.transport.peers.Peer`) keeps one for each, asks how much of a large
    answer has arrived (`received`) before giving up on it, and reports a missed deadline
    with `deadline_missed` so a silent connection is torn down."""

    def __init__(
        self,
        peer: str,
        dial_url: str,
        hello: Hello,
        secret: str | None,
        max_message_bytes: int,
        timeout: float,
        budget: Budget | None = None,
        tls: ssl.SSLContext | None = None,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        """`hello`: what the next connection's HELLO says (each gets a nonce of its
        own, from `random_bytes`); `budget`: the node's byte budget, which counts the
        large writes given up on midway until they have left; `tls`: the context each
        connection is made with (the peer's certificate must name the host of `peer`),
        or None for plain TCP."""
        self.peer = peer
        self._random_bytes = random_bytes
        self._tls = tls
        self._server_hostname = urlsplit(peer).hostname if tls is not None else None
        self._secret = secret
        parts = urlsplit(dial_url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 80
        self.hello = hello  # presented by the next connection
        self._max_message = max_message_bytes
        self._timeout = timeout
        self._budget = budget
        self._connection: ClientConnection | None = None
        self._dialling: asyncio.Task[None] | None = None
        self._waiting: list[tuple[Callable[[int], Request], OnAnswer]] = []
        self.refusal: str | None = None

    def call(self, request_for: Callable[[int], Request], on_answer: OnAnswer) -> None:
        """Sends a request (once connected: the first call dials); `on_answer` gets the
        answer or the PeerError that ended the call. `request_for` is given the call id
        when the request is made: at once, or once the connection is up."""
        connection = self._connection
        if connection is not None and not connection.closed:
            connection.call(request_for, on_answer)
            return
        self._waiting.append((request_for, on_answer))
        if self._dialling is None:
            self._dialling = asyncio.ensure_future(self._dial())

    def forget(self, call_id: int | None) -> None:
        if call_id is not None and self._connection is not None:
            self._connection.forget(call_id)

    def received(self, call_id: int | None) -> int:
        """Bytes of call `call_id`'s answer received so far while it is still arriving
        in fragments; 0 for an answer not begun, complete or small."""
        connection = self._connection
        if call_id is None or connection is None or connection.closed:
            return 0
        return connection.codec.received(call_id)

    def stalled(self, call_id: int | None, since: float) -> bool:
        """Whether call `call_id`'s large request still has fragments waiting to leave
        while none of any message has left since `since` (loop time): the peer has
        stopped reading."""
        connection = self._connection
        if call_id is None or connection is None or connection.closed:
            return False
        return connection.stalled(call_id, since)

    def deadline_missed(self, since: float) -> None:
        """A call sent at `since` (loop time) got no answer in time: if nothing at all
        arrived on its connection since then, the connection is stalled, and every call
        on it fails now."""
        connection = self._connection
        if connection is not None and not connection.closed and connection.last_received < since:
            log.info("replica channel to %s is silent: closing it", self.peer)
            connection.abort()
            connection.fail(PeerError(f"{self.peer}: replica channel silent, closed"))

    async def close(self) -> None:
        """Closes the channel; every pending call fails now, not in a later iteration."""
        if self._dialling is not None:
            self._dialling.cancel()
            await asyncio.gather(self._dialling, return_exceptions=True)
        waiting, self._waiting = self._waiting, []
        for _, on_answer in waiting:
            on_answer(PeerError(f"{self.peer}: node stopping"))
        connection = self._connection
        if connection is not None:
            connection.abort()
            connection.fail(PeerError(f"{self.peer}: node stopping"))

    async def _dial(self) -> None:
        """Connects, sends HELLO, answers the CHALLENGE, then sends every call that
        waited for the connection."""
        loop = asyncio.get_running_loop()
        hello = dataclasses.replace(self.hello, nonce=new_nonce(self._random_bytes))
        challenged: asyncio.Future[str | None] = loop.create_future()
        connection: ClientConnection | None = None
        try:
            async with asyncio.timeout(self._timeout):
                _, connection = await loop.create_connection(
                    lambda: ClientConnection(
                        self.peer,
                        hello,
                        self._secret,
                        self._max_message,
                        self._handshake,
                        self._budget,
                        challenged,
                    ),
                    self._host,
                    self._port,
                    ssl=self._tls,
                    server_hostname=self._server_hostname,
                    ssl_handshake_timeout=self._timeout if self._tls is not None else None,
                )
                connection.send(hello)
                failure = await challenged
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            failure = f"{self.peer}: cannot open the replica channel: {exc!r}"
            if connection is not None:
                connection.abort()
        except asyncio.CancelledError:  # closed mid-handshake: nothing stays open
            if connection is not None:
                connection.abort()
            raise
        finally:
            self._dialling = None
        waiting, self._waiting = self._waiting, []
        if failure is None and connection is not None and connection.closed:
            failure = f"{self.peer}: replica channel closed during its handshake"
        if failure is not None:
            error = PeerError(failure)
            for _, on_answer in waiting:
                on_answer(error)
            return
        assert connection is not None
        self._connection = connection
        for request_for, on_answer in waiting:
            connection.call(request_for, on_answer)

    def _handshake(self, refusal: str | None) -> None:
        """The peer's answer to HELLO: None for WELCOME, else why it refused."""
        if refusal is None and self.refusal is not None:
            log.info("replica channel to %s is open again", self.peer)
        elif refusal is not None and refusal != self.refusal:
            log.warning("%s", refusal)  # once per distinct reason, not once per call
        self.refusal = refusal
