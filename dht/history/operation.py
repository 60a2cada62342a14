"""One attempted client operation as the chaos clients record it (`Op`: its kind, key,
value, ttl, status and when it ran), and the windows of time an observation is made in.
The history checker (`dht.history.checker`) judges a list of them; `dht.conformance.traffic` records
them, `dht.history.run` keeps them with the faults of a run.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

# When the final state was observed, as (from, to) on the history's clock: by default
# after everything, every expiring write expired.
AFTER_EVERYTHING = (math.inf, math.inf)

Window = tuple[float, float]


class Kind(enum.Enum):
    PUT = "PUT"
    DELETE = "DELETE"
    GET = "GET"


_ACKED = {Kind.PUT: 201, Kind.DELETE: 202}


@dataclass(frozen=True, slots=True)
class Op:
    """One attempted client operation. Times are seconds on one monotonic clock.

    `value`: for a PUT the value sent; for a GET answered 200 the value read; else None.
    `status`: the HTTP status, or None when no answer came (time-out, connection lost):
    then `completed` is None too, since the write may take effect at any later time.
    `ttl`: for a PUT sent with `ttl=SECONDS`, those seconds; else None.
    `node`: the name of the node the client sent it to (`node1`, ...), where recorded.
    `replicas`: the `replicas=A/F` it was sent with; None for the node's default.
    """

    kind: Kind
    key: str
    value: bytes | None
    invoked: float
    completed: float | None
    status: int | None
    ttl: float | None = None
    node: str | None = None
    replicas: str | None = None

    @property
    def is_write(self) -> bool:
        return self.kind is not Kind.GET

    @property
    def acknowledged(self) -> bool:
        return self.is_write and self.status == _ACKED[self.kind]

    @property
    def settled_by(self) -> float:
        """The latest moment this op can have taken effect (infinity if never answered)."""
        return math.inf if self.completed is None else self.completed

    @property
    def expires_after(self) -> float:
        """The earliest moment an expiring PUT can expire (infinity: it never does)."""
        return math.inf if self.ttl is None else self.invoked + self.ttl

    @property
    def expired_by(self) -> float:
        """The moment by which an expiring PUT has certainly expired (else infinity)."""
        return math.inf if self.ttl is None else self.settled_by + self.ttl

    def describe(self) -> str:
        """The write as a report names it, with the time it ran and the node it went
        through (where recorded)."""
        if self.kind is Kind.DELETE:
            what = "DELETE"
        else:
            what = f"{self.kind.value} {self.value!r}"
            if self.ttl is not None:
                what += f" ttl={self.ttl:g}"
        through = "" if self.node is None else f" through {self.node}"
        return f"{what} [{self.invoked:.3f}, {self.settled_by:.3f}]{through}"
