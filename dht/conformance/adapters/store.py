"""What the run asks of an adapter's store (`Store`), and what a store that can take
partitions, clock steps or power cuts adds (`Partitionable`, `Skewable`, `Powerable`):
`dht.conformance.adapters.example` is one to copy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from dht.history.operation import Kind, Op
from dht.testbed.page_cache import Unsynced


class Store(Protocol):
    """What an adapter gives the run: `dht.conformance.adapters.example` says what each
    part must do, and is one to copy; `etcd.EtcdCluster` and `redis.RedisCluster`."""

    name: str
    promise: str  # "linearizable", or what else it promises

    @property
    def members(self) -> Sequence[object]:
        """Its members: only their number is read."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def leader(self) -> int | None:
        """The member that leads now (etcd's Raft leader, Redis's primary), if known."""

    def kill(self, index: int) -> None: ...

    def restart(self, index: int) -> None: ...

    def pause(self, index: int) -> None: ...

    def resume(self, index: int) -> None: ...

    def attempt(
        self, index: int, kind: Kind, key: str, value: bytes | None, timeout: float, name: str
    ) -> Op: ...


@runtime_checkable
class Partitionable(Protocol):
    """What a store that can be partitioned adds (an adapter may not: the nemesis then
    draws no partition). `prepare_partitions` is asked before `start`, once a run wants
    partitions: None if the store can make them here, else why not (the run says so and
    draws none)."""

    def prepare_partitions(self) -> str | None: ...

    def partition(self, index: int) -> None:
        """Member `index` cut off from every other member, both ways; the clients still
        reach it."""

    def heal(self, index: int) -> None: ...


@runtime_checkable
class Skewable(Protocol):
    """What a store whose members' wall clocks can be stepped adds (`clock.Clocks`
    makes them for members that are processes on this machine). `prepare_clocks` is
    asked before `start`, once a run wants clock faults: None if this machine can step
    them, else why not; `clocks_unreached` once it started: None if a step reaches
    every process of every member, else why not (a program that reads the clock where
    the fake clock cannot reach it). Either way the run says why and draws the others."""

    def prepare_clocks(self) -> str | None: ...

    def clocks_unreached(self) -> str | None: ...

    def step_clock(self, index: int, seconds: float) -> None:
        """Member `index`'s wall clock `seconds` off the true time (negative: behind;
        0: true again) until the next step; its monotonic clock untouched."""


@runtime_checkable
class Powerable(Protocol):
    """What a store whose members' power can be cut adds (`power.Power` makes it for
    members whose data is a folder on this machine). `prepare_power` is asked before
    `start`, once a run wants power faults: None if each member's data folder can be a
    mount of the lazy filesystem here (the store then mounts them before it starts and
    unmounts them when it stops), else why not (the run says so and draws the others).
    After a cut, `restart(index)` brings the whole member back on what is left."""

    def prepare_power(self) -> str | None: ...

    def power_cut(self, index: int) -> Unsynced:
        """Every process of member `index` killed with SIGKILL at once, then what its
        data folder had not fsynced dropped: returned, as the lazy filesystem counts it."""
