"""What the history checker (`dht.history.checker.check`) finds: the ways a run can fail,
each as a value that names the operations involved and reads as one line of a report
(a lost write, a resurrection, a phantom, a stale read), and the `Report` that counts
the operations and holds them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from dht.history.operation import Kind, Op

# The source a verdict names when the final state saw it (else `read_source`'s).
FINAL_READ = "final read"


def read_source(read: Op) -> str:
    """How a verdict names a GET it blames: "GET at <invoke time>", and the node it went
    through where recorded."""
    through = "" if read.node is None else f" through {read.node}"
    return f"GET at {read.invoked:.3f}{through}"


def _shown(state: bytes | None) -> str:
    return "absent" if state is None else repr(state)


@dataclass(frozen=True, slots=True)
class LostWrite:
    """An acknowledged PUT that must be visible in the final state and is not."""

    write: Op
    final: bytes | None

    def __str__(self) -> str:
        return (
            f"{self.write.key!r}: acknowledged {self.write.describe()} lost, "
            f"final {_shown(self.final)}"
        )


@dataclass(frozen=True, slots=True)
class Resurrection:
    """A value seen (finally, or by a GET during the run) that must be dead: after
    `dead_by`, an acknowledged DELETE or an acknowledged PUT that has since expired, or
    `dead_by` is the (expired) PUT that sent the value itself."""

    key: str
    value: bytes
    source: str  # FINAL_READ or "GET at <time>[ through <node>]"
    dead_by: Op
    read: Op | None = None  # the GET that saw it; None in the final state

    @property
    def in_final_state(self) -> bool:
        return self.source == FINAL_READ

    def __str__(self) -> str:
        if self.dead_by.kind is Kind.PUT and self.dead_by.value == self.value:
            why = f"after it expired (by {self.dead_by.expired_by:.3f})"
        elif self.dead_by.kind is Kind.DELETE:
            why = f"after the acknowledged {self.dead_by.describe()}"
        else:
            why = (
                f"after the acknowledged {self.dead_by.describe()} expired "
                f"(by {self.dead_by.expired_by:.3f})"
            )
        return f"{self.key!r}: {self.source} saw {self.value!r} resurrected {why}"


@dataclass(frozen=True, slots=True)
class Phantom:
    """A value read (finally, or by a GET during the run) that no PUT of that key sent."""

    key: str
    value: bytes
    source: str  # FINAL_READ or "GET at <time>[ through <node>]"

    @property
    def in_final_state(self) -> bool:
        return self.source == FINAL_READ

    def __str__(self) -> str:
        return f"{self.key!r}: {self.source} saw {self.value!r}, which was never written"


@dataclass(frozen=True, slots=True)
class StaleRead:
    """A GET that missed an acknowledged PUT, completed before it was invoked, that was
    still to be visible."""

    read: Op
    missed: Op

    def __str__(self) -> str:
        return (
            f"{self.read.key!r}: GET [{self.read.invoked:.3f}, {self.read.settled_by:.3f}]"
            f"{'' if self.read.node is None else f' through {self.read.node}'} "
            f"saw {_shown(self.read.value)}, missing the acknowledged {self.missed.describe()}"
        )


@dataclass(frozen=True, slots=True)
class Report:
    ops: int
    writes: int
    acked: int
    unavailable: int  # 503
    not_enough_replicas: int  # 504
    timeouts: int  # no answer at all
    other_failures: int
    lost: tuple[LostWrite, ...]
    resurrected: tuple[Resurrection, ...]
    phantoms: tuple[Phantom, ...]
    stale_reads: tuple[StaleRead, ...]
    expiring: int = 0  # PUTs sent with a ttl
    deletes: int = 0

    @property
    def ok(self) -> bool:
        return self.final_state_ok and self.reads_ok

    @property
    def final_state_ok(self) -> bool:
        """No acknowledged write lost, nothing dead back, no final value from nowhere."""
        return (
            not self.lost
            and not any(r.in_final_state for r in self.resurrected)
            and not any(p.in_final_state for p in self.phantoms)
        )

    @property
    def reads_ok(self) -> bool:
        """No GET missed an acknowledged write, saw a dead value or one from nowhere."""
        return (
            not self.stale_reads
            and all(r.in_final_state for r in self.resurrected)
            and all(p.in_final_state for p in self.phantoms)
        )

    def summary(self) -> str:
        return (
            f"ops={self.ops} writes={self.writes} (deletes={self.deletes} "
            f"expiring={self.expiring}) acked={self.acked} "
            f"503={self.unavailable} 504={self.not_enough_replicas} "
            f"timeouts={self.timeouts} other_failures={self.other_failures} "
            f"lost={len(self.lost)} resurrected={len(self.resurrected)} "
            f"phantoms={len(self.phantoms)} stale_reads={len(self.stale_reads)}"
        )

    def details(self, limit: int = 20) -> str:
        problems = [
            str(item) for item in (*self.lost, *self.resurrected, *self.phantoms, *self.stale_reads)
        ]
        more = len(problems) - limit
        return "\n".join(problems[:limit] + ([f"... and {more} more"] if more > 0 else []))
