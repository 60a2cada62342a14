"""An adapter to copy: a store of three in-memory replicas, written to show what the kit
asks of an adapter (`dht.conformance.adapters.store.Store`), and graded like any other:

    python -m dht.conformance.adapters --adapter dht/conformance/adapters/example.py:Lagging

Give `--adapter FILE.py:CLASS` your own: CLASS(folder) is made with a folder for its
data and logs, and must have
- `name` and `promise` ("linearizable" has the linearizability checker decide);
- `members`, whose number is the number of members the clients and the nemesis use;
- `start()` (a cluster that serves when it returns) and `stop()` (nothing left running);
- `kill(i)`, `restart(i)` (on its data), `pause(i)`, `resume(i)`, and `leader()`
  (the index that leads now, or None) for `--at-leader`;
- if it can: `prepare_partitions()` (asked before `start`: None, or why it cannot
  here), `partition(i)` (member `i` cut off from the others, the clients still reaching
  it) and `heal(i)`; `dht.conformance.adapters.partition` makes them for members that
  are processes on this machine (the etcd and Redis adapters use it). Without them the
  nemesis draws no partition, and the run says so;
- if it can: `prepare_clocks()` (asked before `start`: None, or why it cannot here),
  `clocks_unreached()` (asked once started: None, or why a step would not reach a
  member) and `step_clock(i, seconds)` (member `i`'s wall clock that far off the true
  time, 0 setting it true); `dht.conformance.adapters.clock` makes them for processes
  that read the time through the C library. Without them the nemesis draws no clock
  fault, and the run says so;
- if it can: `prepare_power()` (asked before `start`: None, or why it cannot here;
  then its members' data folders are mounts made before `start` and taken away by
  `stop`) and `power_cut(i)` (every process of member `i` killed with SIGKILL at once,
  then what its data had not fsynced dropped, returned as `Unsynced`), after which
  `restart(i)` brings the whole member back; `dht.conformance.adapters.power` makes the
  mounts and the cuts for members whose data is a folder on this machine. Without them
  the nemesis draws no power cut, and the run says so;
- `attempt(i, kind, key, value, timeout, name)`: one operation through member `i`,
  from several client threads at once, returned as a `dht.history.operation.Op` in the
  course API's terms: a PUT the store acknowledged has status 201, a DELETE 202, a GET
  200 with the value read or 404; a refusal a 5xx (for a write: it may have happened);
  no answer within `timeout` the status None and completed None.

Here every member holds a copy, a write goes to every copy under one lock, and a read
is answered by the member asked. `Locked` reads under the same lock: linearizable.
`Lagging` lets a member apply the writes 20 ms after they were acknowledged: its reads
may be stale, and the kit says so.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from dht.history.operation import Kind, Op

LAG = 0.02  # seconds after which a lagging member has applied a write


class Locked:
    name = "example-locked"
    promise = "linearizable"
    lag = 0.0

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.members = ["m0", "m1", "m2"]
        self._lock = threading.Lock()
        # Each member's copy: key -> (the moment it is applied, the value, None: absent).
        self._copies: list[dict[str, list[tuple[float, bytes | None]]]] = [{}, {}, {}]
        self._down: set[int] = set()
        self._paused: dict[int, threading.Event] = {}

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def stop(self) -> None:
        for index in list(self._paused):
            self.resume(index)

    def kill(self, index: int) -> None:
        self._down.add(index)  # its copy is kept, as a disk would keep it

    def restart(self, index: int) -> None:
        self._down.discard(index)

    def pause(self, index: int) -> None:
        self._paused.setdefault(index, threading.Event())

    def resume(self, index: int) -> None:
        paused = self._paused.pop(index, None)
        if paused is not None:
            paused.set()

    def leader(self) -> int | None:
        return None

    def attempt(
        self, index: int, kind: Kind, key: str, value: bytes | None, timeout: float, name: str
    ) -> Op:
        invoked = time.monotonic()
        paused = self._paused.get(index)
        if index in self._down or (paused is not None and not paused.wait(timeout)):
            return Op(kind, key, value, invoked, None, None, node=name)  # no answer
        with self._lock:
            now = time.monotonic()
            if kind is Kind.GET:
                read = self._read(self._copies[index].get(key, []), now)
                status = 404 if read is None else 200
                return Op(kind, key, read, invoked, time.monotonic(), status, node=name)
            for member, copy in enumerate(self._copies):
                applied = now if member == index else now + self.lag
                copy.setdefault(key, []).append((applied, value if kind is Kind.PUT else None))
        status = 201 if kind is Kind.PUT else 202
        return Op(kind, key, value, invoked, time.monotonic(), status, node=name)

    @staticmethod
    def _read(writes: list[tuple[float, bytes | None]], now: float) -> bytes | None:
        """The value of the last write this member has applied by `now`."""
        applied = [value for at, value in writes if at <= now]
        return applied[-1] if applied else None


class Lagging(Locked):
    name = "example-lagging"
    lag = LAG
