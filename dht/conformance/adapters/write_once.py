"""The adapters' write-once keys (`--write-once`): a share of each client's operations
are PUTs of a fresh key of its own, written once and never again, read in the run's
final read with the others.

Why: the clients' few keys are overwritten all along, so a write a store discarded is
nearly always followed by a later one the final read explains it by, and the history
checker finds the loss only as a stale read, if a GET happened to fall on it. A key
written once has nothing after it: an acknowledged PUT of one that the final read
misses is a lost write, named with its key and value (the simulator's `--write-once`
does the same for dht, `dht.simulation.workload`).

The draws come from a random stream of their own per client, seeded from the run's
seed and the client, never from the clients' stream (`traffic.Clients`): with or
without write-once keys, a client draws the same members, keys and operations, and
without them a seed's operations are those it drew before they existed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from dht.history.operation import Kind, Op

# One operation in three, while the client is within its allowance of keys (below): the
# overwritten keys keep two thirds of the traffic at least, their reads and writes still
# racing each other, and a store slower than the allowance (etcd through partitions, at
# tens of operations a second) still writes a fresh key one operation in three.
SHARE = 1 / 3
# The fresh keys of one run at most, for all clients together: each is read at the end,
# one read after another, so the final read stays within seconds (Redis answers one in
# about a millisecond, etcd's JSON gateway in a few). They are allowed evenly over the
# run (a client's allowance grows with the time gone): Redis answers each client about
# 1,000 operations a second, so one in three alone would spend the cap in the first two
# seconds, before most faults, and find no loss after them.
MOST_KEYS = 3000


class WriteOnce:
    """Which of a client's operations are replaced by the PUT of a fresh key, and the
    keys so written (`keys`, for the final read). `client` is a client's number
    (0 to `clients` - 1); each client has its own stream and its own share of
    `most_keys`, so what a client sends does not hang on how fast the others go. The
    share is allowed evenly over `seconds` from the making, by `clock`: at t seconds,
    a client may have written `most_keys / clients * t / seconds` keys, and one more."""

    def __init__(
        self,
        seed: int,
        clients: int,
        seconds: float,
        clock: Callable[[], float],
        share: float = SHARE,
        most_keys: int = MOST_KEYS,
    ) -> None:
        self._share = share
        self._most_per_client = most_keys // clients
        self._seconds = seconds
        self._clock = clock
        self._started = clock()
        self._streams = [random.Random(f"write-once/{seed}/{client}") for client in range(clients)]
        self._written: list[list[str]] = [[] for _ in range(clients)]
        self._lock = threading.Lock()

    def fresh(self, client: int) -> tuple[str, bytes] | None:
        """The key and value of the fresh PUT that replaces `client`'s next operation,
        or None if it sends the operation it drew. A draw is made for every operation,
        so the choices stay the seed's whatever the allowance cut off."""
        written = self._written[client]
        if self._streams[client].random() >= self._share:
            return None
        elapsed = min(1.0, (self._clock() - self._started) / self._seconds)
        if len(written) >= min(self._most_per_client, int(self._most_per_client * elapsed) + 1):
            return None
        key = f"once-{client}-{len(written) + 1:05d}"
        with self._lock:
            written.append(key)
        return key, f"client{client}-{key}".encode()

    def keys(self) -> list[str]:
        """Every fresh key some client sent a PUT of (answered or not: one unanswered
        may have been applied), in client order."""
        with self._lock:
            return [key for written in self._written for key in written]


def client_number(thread_name: str) -> int:
    """A client's number from its thread's name (`traffic.Clients` names them
    client-N): the one thing a `send` knows of who calls it."""
    prefix, _, number = thread_name.rpartition("-")
    if prefix != "client" or not number.isdigit():
        raise ValueError(f"not a client's thread: {thread_name!r}")
    return int(number)


def sender(attempt: Callable[..., Op], once: WriteOnce | None) -> Callable[..., Op]:
    """The clients' `send` (`traffic.Clients`) for a store's `attempt`: the operation a
    client drew, or, for a share of each client's operations with `once`, the PUT of a
    fresh key instead, through the same member."""

    def send(index: int, kind: Kind, key: str, value: bytes | None, timeout: float,
             ttl: int | None = None, node_name: str | None = None,
             replicas: str | None = None) -> Op:  # fmt: skip
        name = node_name or f"m{index}"
        if once is not None:
            fresh = once.fresh(client_number(threading.current_thread().name))
            if fresh is not None:
                return attempt(index, Kind.PUT, fresh[0], fresh[1], timeout, name)
        return attempt(index, kind, key, value, timeout, name)

    return send
