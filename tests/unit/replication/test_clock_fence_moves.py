"""The clock fence's second rule (SPEC.md rule 9.13) on a node whose peers split evenly:
it is spared for being ahead only of peers seen to jump back past the bound, a move its
own clock did not make. Found by two reviews: a rule with no exception fenced the right
node when a peer restarted behind; a voucher for "its own clock did not step" let a node
drift, step in small steps, or be vouched for by a peer wrong the same way, and serve
ahead. Here this node is n1; n3 is down unless a test says otherwise; the clocks (this
node's wall and monotonic, true time) move only when a test moves them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dht.replication.fence import FenceWatch
from tests.unit.replication.test_clock_fence_watch import (
    NOW,
    URLS,
    PeerFromMemory,
)
from tests.unit.replication.test_clock_fence_watch import watch as watch_of


class Clocks:
    """True time, and this node's wall and monotonic clocks (ms)."""

    def __init__(self) -> None:
        self.true = NOW
        self.wall = NOW
        self.monotonic = 10_000

    def tick(self, ms: int, own_rate: float = 1.0) -> None:
        """`ms` of true time pass; this node's crystal runs at `own_rate` (its wall and
        monotonic clocks alike, as a crystal or NTP's slew moves both)."""
        self.true += ms
        self.wall += round(ms * own_rate)
        self.monotonic += round(ms * own_rate)


def watch(
    tmp_path: Path, clocks: Clocks, n2_clock: Callable[[], int]
) -> tuple[FenceWatch, PeerFromMemory, PeerFromMemory]:
    """The watch of n1 on `clocks`, n2 answering with `n2_clock`, n3 down and right."""
    n2, n3 = PeerFromMemory(URLS[1], n2_clock), PeerFromMemory(URLS[2], lambda: clocks.true)
    n3.down = True
    fence, _ = watch_of(
        tmp_path, lambda: clocks.wall, [n2, n3], lambda: clocks.monotonic * 1_000_000
    )
    return fence, n2, n3


async def look(fence: FenceWatch, *clocks: Clocks) -> None:
    """Five seconds of true time pass on each of `clocks`, then the fence looks."""
    for clock in clocks:
        clock.tick(5_000)
    await fence.check()


def ahead_of_n2_s(fence: FenceWatch) -> float:
    offset = fence.offsets[URLS[1]]
    assert offset is not None
    return -offset.estimate_ms / 1000


async def test_a_peer_that_jumps_back_leaves_this_node_serving_until_its_own_clock_steps(
    tmp_path: Path,
) -> None:
    clocks = Clocks()
    n2_wall = Clocks()
    fence, _, _ = watch(tmp_path, clocks, lambda: n2_wall.true)
    await fence.first_check()
    n2_wall.true -= 120_000  # n2 restarted two minutes behind
    await look(fence, clocks, n2_wall)
    assert fence.clock_fenced is None  # the move was n2's
    await look(fence, clocks, n2_wall)
    assert fence.clock_fenced is None  # still n2's, look after look
    clocks.wall += 120_000  # now this node steps ahead too
    await look(fence, clocks, n2_wall)
    assert fence.clock_fenced is not None and "~240 s ahead of 1 of the 2" in fence.clock_fenced


async def test_a_node_drifting_ahead_is_fenced_once_past_the_bound(tmp_path: Path) -> None:
    """Its crystal 1 % fast (or NTP slewing it the wrong way): no step, no jump."""
    clocks = Clocks()
    fence, _, _ = watch(tmp_path, clocks, lambda: clocks.true)
    await fence.first_check()
    for _ in range(1400):  # 1,400 looks 5 s apart: 70 s ahead by the end
        clocks.tick(5_000, own_rate=1.01)
        await fence.check()
    assert ahead_of_n2_s(fence) > 60
    assert fence.clock_fenced is not None


async def test_steps_each_under_half_the_bound_add_up_to_a_fence(tmp_path: Path) -> None:
    clocks = Clocks()
    fence, _, _ = watch(tmp_path, clocks, lambda: clocks.true)
    await fence.first_check()
    for _ in range(3):
        clocks.wall += 29_000
        await look(fence, clocks)
    assert 86 < ahead_of_n2_s(fence) < 88
    assert fence.clock_fenced is not None


async def test_a_peer_wrong_the_same_way_does_not_spare_it_from_the_right_one(
    tmp_path: Path,
) -> None:
    """n1 and n2 both two minutes ahead, n3 right: then n2 goes. n3 was never within
    the bound of n1, so n1 ahead of it is fenced."""
    clocks = Clocks()
    clocks.wall += 120_000
    fence, n2, n3 = watch(tmp_path, clocks, lambda: clocks.true + 120_000)
    n3.down = False
    await fence.first_check()
    assert fence.clock_fenced is None  # n2 with it, n3 behind: 1 of 3
    n2.down = True
    await look(fence, clocks)
    assert fence.clock_fenced is not None


async def test_a_step_while_the_asks_are_out_is_seen_as_this_nodes_own(tmp_path: Path) -> None:
    clocks = Clocks()
    fence, n2, _ = watch(tmp_path, clocks, lambda: clocks.true)

    def step() -> None:
        clocks.wall += 120_000

    n2.during = step  # after n2 read its clock, before its answer came
    await fence.first_check()
    await look(fence, clocks)
    assert 119 < ahead_of_n2_s(fence) < 121
    assert fence.clock_fenced is not None


async def test_a_long_round_trip_does_not_count_as_a_peer_within_the_bound(
    tmp_path: Path,
) -> None:
    """Restarted two minutes ahead and fenced; one look takes four minutes (a pause):
    its interval is too wide to say the peer is off, and too wide to say it was within
    it when it then shows behind."""
    clocks = Clocks()
    clocks.wall += 120_000
    fence, n2, _ = watch(tmp_path, clocks, lambda: clocks.true)
    await fence.first_check()
    assert fence.clock_fenced is not None

    def pause() -> None:
        clocks.tick(240_000)

    n2.during = pause
    await fence.check()
    await look(fence, clocks)
    assert 119 < ahead_of_n2_s(fence) < 121
    assert fence.clock_fenced is not None


# Found by a third review, each a way the rule above spared a node really ahead (or
# fenced the right one), now held:


async def test_a_step_ahead_in_the_same_interval_as_a_peer_jump_is_not_taken_for_it(
    tmp_path: Path,
) -> None:
    """This node steps 120 s ahead while its peer restarts 40 s behind: less its own
    step, the peer moved 40 s, a jump; but its own step says it may have moved too."""
    clocks, n2_wall = Clocks(), Clocks()
    fence, _, _ = watch(tmp_path, clocks, lambda: n2_wall.true)
    await fence.first_check()
    clocks.wall += 120_000
    n2_wall.true -= 40_000
    for _ in range(3):
        await look(fence, clocks, n2_wall)
        assert fence.clock_fenced is not None


async def test_a_step_of_its_own_clock_between_the_look_and_the_asks_is_its_own(
    tmp_path: Path,
) -> None:
    """The asks take the look's base for their send times: a step after it is seen by
    neither this look's offsets nor its base, and by both at the next."""
    clocks = Clocks()
    fence, _, _ = watch(tmp_path, clocks, lambda: clocks.true)
    await fence.first_check()
    reads = 0

    def wall() -> int:
        nonlocal reads
        reads += 1
        if reads == 2:  # the first read after the base's
            clocks.wall += 120_000
        return clocks.wall

    fence._wall_ms = wall  # type: ignore[method-assign]
    await look(fence, clocks)
    assert fence.clock_fenced is None  # the step is not in this look at all,
    assert URLS[1] not in fence._moved_back  # nor taken for its peer's jump
    await look(fence, clocks)
    assert 119 < ahead_of_n2_s(fence) < 121
    assert fence.clock_fenced is not None


async def test_a_node_near_the_bound_whose_peer_jumps_back_is_fenced_once_past_it(
    tmp_path: Path,
) -> None:
    """55 s ahead (within), its peer jumps 40 s back (spared), then it steps 29 s ahead,
    under half the bound: less the peer's jump, the peer is 84 s behind it, past it."""
    clocks, n2_wall = Clocks(), Clocks()
    clocks.wall += 55_000
    fence, _, _ = watch(tmp_path, clocks, lambda: n2_wall.true)
    await fence.first_check()
    n2_wall.true -= 40_000
    await look(fence, clocks, n2_wall)
    assert fence.clock_fenced is None
    clocks.wall += 29_000
    await look(fence, clocks, n2_wall)
    assert fence.clock_fenced is not None


async def test_a_wide_first_answer_after_a_peer_restarted_behind_erases_nothing(
    tmp_path: Path,
) -> None:
    """Its first answer after the restart took 70 s (neither within nor beyond): the
    answer within from before it still counts, so the next, certain one is a jump."""
    clocks, n2_wall = Clocks(), Clocks()
    slow = False

    def n2_clock() -> int:
        nonlocal slow
        if slow:
            slow = False
            clocks.tick(70_000)
            n2_wall.tick(70_000)
        return n2_wall.true

    fence, _, _ = watch(tmp_path, clocks, n2_clock)
    await fence.first_check()
    n2_wall.true -= 120_000
    slow = True
    await look(fence, clocks, n2_wall)
    await look(fence, clocks, n2_wall)
    assert 119 < ahead_of_n2_s(fence) < 121
    assert fence.clock_fenced is None


async def test_a_peer_silent_an_hour_that_comes_back_behind_leaves_this_node_serving(
    tmp_path: Path,
) -> None:
    clocks, n2_wall = Clocks(), Clocks()
    fence, n2, _ = watch(tmp_path, clocks, lambda: n2_wall.true)
    await fence.first_check()
    n2.down = True
    clocks.tick(3_600_000)
    n2_wall.tick(3_600_000)
    await fence.check()
    n2_wall.true -= 120_000
    n2.down = False
    await fence.check()
    assert fence.clock_fenced is None
