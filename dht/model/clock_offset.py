"""How far this node's clock is from its peers', and when it is too far to serve clients
(SPEC.md rule 9.13).

A peer's answer carries the peer's wall clock, `theirs`, read at some moment between the
one this node sent the request at (`sent`, by its own wall clock) and the one the answer
came back at (`received`). So the offset, their clock minus this one, lies in
[theirs - received, theirs - sent], whatever the link did: a slow answer widens the
interval, it never fakes an offset. A peer counts as off only when the whole interval is
beyond the bound (`--max-clock-drift`), so a slow link never fences anyone.

The rule is CockroachDB's (a node whose clock is off from a majority of the others by
more than the allowed offset stops serving): a node fences its clock when the peers whose
clocks are off from its own are more than half of the cluster's nodes, itself included.
One node skewed among three sees two off and is fenced; each of the two others sees one
and is not. A peer that did not answer tells nothing, so it is not counted as off.

Where the nodes that answered cannot tell which clock is wrong (as many against this
node as with it, itself included), the side ahead is fenced and the side behind is not:
a version ahead is the one that does harm. Refused by the peers behind it (rule 8.4), a
write through a node ahead is answered 504 but stays in that node's own copy, and once
real time reaches its version it wins over every write acknowledged since (found by the
simulator: a node restarted minutes ahead while one peer of three was down coordinated,
and 5 keys lost acknowledged writes that way). A write through a node behind is stamped
older than records it cannot pass, which it answers 504 (rule 9.13), or older than
everything written since, which it loses to: it takes nothing acknowledged away.

Unless each peer behind it is known to have moved (`behind_moved`): seen within the
bound a little earlier, then behind it past the bound, by a jump of more than half the
bound that this node's own clock did not make (a peer restarted with its clock behind),
and, less that jump, not past the bound. Fencing the node then would leave only the
wrong clock serving, or, with the link between two right nodes cut, none (found by
review). Drift, a slew or a series of small steps never makes such a jump, and a peer
never seen within the bound is never known to have moved, so a node ahead of it is
fenced (`dht.replication.fence` keeps the record).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Offset:
    """A peer's clock minus this node's, known to lie in [low_ms, high_ms]."""

    low_ms: int
    high_ms: int

    @classmethod
    def measured(cls, theirs_ms: int, sent_ms: int, received_ms: int) -> Offset:
        """The offset from one answer: `theirs_ms` read by the peer between `sent_ms` and
        `received_ms`, both read from this node's clock."""
        if received_ms < sent_ms:
            raise ValueError(f"answer received ({received_ms}) before it was sent ({sent_ms})")
        return cls(theirs_ms - received_ms, theirs_ms - sent_ms)

    @property
    def estimate_ms(self) -> int:
        """The middle of the interval (what a log line or a gauge shows)."""
        return (self.low_ms + self.high_ms) // 2

    def beyond(self, bound_ms: int) -> bool:
        """Whether the clocks certainly differ by more than `bound_ms`, either way."""
        return self.low_ms > bound_ms or self.high_ms < -bound_ms

    def within(self, bound_ms: int) -> bool:
        """Whether the clocks certainly differ by no more than `bound_ms` (an interval
        too wide is neither `within` nor `beyond`)."""
        return -bound_ms <= self.low_ms and self.high_ms <= bound_ms

    def to_json(self) -> dict[str, float]:
        """Seconds, as /v0/status shows them."""
        return {
            "estimate": self.estimate_ms / 1000,
            "low": self.low_ms / 1000,
            "high": self.high_ms / 1000,
        }


def clock_fence(
    offsets: Iterable[Offset], nodes: int, bound_ms: int, behind_moved: bool = False
) -> str | None:
    """Why this node must not serve clients, given the offsets it measured from its peers
    (one per peer that answered) in a cluster of `nodes` nodes (itself included); None
    when its clock is neither off from a majority of the cluster nor ahead of as many of
    the nodes that answered as are with it, unless each peer behind it is known to have
    moved (`behind_moved`; the module's docstring)."""
    measured = list(offsets)
    off = sorted(offset.estimate_ms for offset in measured if offset.beyond(bound_ms))
    behind_it = [estimate for estimate in off if estimate < 0]  # their clock minus its own
    with_it = 1 + len(measured) - len(off)  # itself, and the peers within the bound
    bound = f"--max-clock-drift ({_seconds(bound_ms)} s)"
    if 2 * len(off) > nodes:
        typical = off[len(off) // 2]  # negative when this node is ahead
        direction = "ahead of" if typical < 0 else "behind"
        return (
            f"this node's clock is ~{_seconds(abs(typical))} s {direction} the majority of "
            f"the cluster: {len(off)} of its {nodes} nodes' clocks differ from it by more "
            f"than {bound}, so they refuse its versions or it refuses theirs. It serves no "
            "client until its clock is back within the bound"
        )
    if behind_it and len(behind_it) >= with_it and not behind_moved:
        typical = behind_it[len(behind_it) // 2]
        return (
            f"this node's clock is ~{_seconds(abs(typical))} s ahead of {len(behind_it)} of "
            f"the {len(measured) + 1} nodes that answered (itself included), by more than "
            f"{bound}, and no more of them agree with it: they refuse its versions, and a "
            "write refused by them would stay in its own copy and, once real time reached "
            "it, win over writes acknowledged since. It serves no client until its clock "
            "is back within the bound, or more nodes agree with it"
        )
    return None


def _seconds(ms: int) -> str:
    """120000 -> "120", 6400 -> "6.4" (never an exponent: a clock can be a year off)."""
    return f"{ms / 1000:.1f}".removesuffix(".0")
