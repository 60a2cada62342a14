"""Connections that send a node prepared bytes and read what it answers until it closes
them: the live channel fuzz's own client, with no protocol of its own.

Every connection of an exchange sends at once, one write per chunk with a short pause
between (TCP_NODELAY, so the node may see each cut), then all half-close together (so a
crowd is open at the same moment) and read until the node closes each. The node closes
a connection at EOF at the latest; one that neither takes bytes, answers nor closes for
`STALL_DEADLINE` seconds is a hang.
"""

from __future__ import annotations

import select
import socket
import time
from collections import deque
from dataclasses import dataclass, field

from dht.conformance.http_client import HOST
from dht.conformance.launcher import Node
from dht.transport.messages import Event
from dht.transport.protocol import ReplicaCodec

STALL_DEADLINE = 15.0


@dataclass
class Connection:
    sock: socket.socket
    chunks: deque[bytes]
    received: bytearray = field(default_factory=bytearray)
    ended: bool = False  # the node closed it (or reset it)

    @classmethod
    def opened(cls, sock: socket.socket, chunks: tuple[bytes, ...]) -> Connection:
        """`sock`, already connected (past a handshake, say), to send `chunks` on."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        return cls(sock, deque(chunk for chunk in chunks if chunk))

    @classmethod
    def to(cls, node: Node, chunks: tuple[bytes, ...]) -> Connection:
        return cls.opened(socket.create_connection((HOST, node.port), timeout=5.0), chunks)

    def send_one(self) -> bool:
        """Sends the next chunk, or what the socket takes of it; stops sending when the
        node has closed (it may close a stranger at any byte). Whether bytes left."""
        chunk = self.chunks.popleft()
        try:
            sent = self.sock.send(chunk)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.chunks.clear()
            return False
        if sent < len(chunk):
            self.chunks.appendleft(chunk[sent:])
        return sent > 0

    def half_close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:  # reset by the node meanwhile: read() sees it
            pass

    def read(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:  # reset: the node aborted it
            data = b""
        if data:
            self.received += data
        else:
            self.ended = True
            self.sock.close()


def exchange(connections: list[Connection], pause: float = 0.001) -> None:
    """Sends every connection's chunks, half-closes them all once every chunk is out,
    and reads until the node has closed each; AssertionError on a stall."""
    half_closed = False
    progress = time.monotonic()
    while not all(connection.ended for connection in connections):
        writing = [c for c in connections if c.chunks and not c.ended]
        for connection in writing:
            if connection.send_one():
                progress = time.monotonic()
        if not writing and not half_closed:
            half_closed = True
            for connection in connections:
                if not connection.ended:
                    connection.half_close()
        reading = [c for c in connections if not c.ended]
        ready = set(select.select([c.sock for c in reading], [], [], pause if writing else 0.05)[0])
        for connection in reading:
            if connection.sock in ready:
                connection.read()
                progress = time.monotonic()
        if time.monotonic() - progress > STALL_DEADLINE:
            stalled = sum(1 for c in connections if not c.ended)
            raise AssertionError(
                f"{stalled} connection(s) stalled for {STALL_DEADLINE} s "
                f"({'after EOF' if half_closed else 'the node reads nothing'})"
            )


def events_in(received: bytes, codec: ReplicaCodec) -> list[Event]:
    """What the node answered, decoded by `codec`; bytes cut at the end (a reset) are no
    error, bytes outside the protocol are (ProtocolError)."""
    codec.receive_data(received)
    events = []
    while (event := codec.next_event()) is not None:
        events.append(event)
    return events
