"""SPEC.md rule 9.13, the coordinator's side, with replicas on real storage and no
sockets: a write that a replica of its decision kept a newer record over is sent again
with a newer version; what does not call for that, and what must not break it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dht.coordination.coordinator import Coordinator, Status
from dht.limits import RESTAMPS
from dht.model.clock import HybridClock, version_at
from dht.model.record import Record
from dht.storage.store import Storage
from dht.transport.peers import PeerError

WALL_MS = 1_700_000_000_000
SELF = "http://self"
A, B, C = "http://a", "http://b", "http://c"
KEY = b"k"


class Replica:
    """A replica of one key on a real `Storage` (put-if-newer as a node decides it).
    `hold` keeps its answers back until `release`; `before_put` runs as the next put
    arrives (something else reached the replica first)."""

    def __init__(self, url: str, folder: Path, record: Record | None = None) -> None:
        self.url = url
        self.storage = Storage(folder / url.removeprefix("http://"), durability="none")
        if record is not None:
            self.storage.write(KEY, record)
        self.hold = False
        self.held: list[Callable[[], None]] = []
        self.before_put: Callable[[Record], None] | None = None
        self.puts: list[Record] = []
        self.reads_fail = False  # its puts are answered, its reads are not

    @property
    def record(self) -> Record | None:
        return self.storage.get(KEY)

    remote = True

    def available(self) -> bool:
        return True

    def retry_after(self) -> float:
        return 0.0

    def _answer(self, future: asyncio.Future[Any], compute: Callable[[], Any]) -> None:
        def run() -> None:
            if not future.done():
                future.set_result(compute())

        if self.hold:
            self.held.append(run)
        else:
            asyncio.get_running_loop().call_soon(run)

    def release(self) -> None:
        self.hold = False
        held, self.held = self.held, []
        for run in held:
            run()

    def put(self, key: bytes, record: Record) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def apply() -> bool:
            if self.before_put is not None:
                before, self.before_put = self.before_put, None  # once
                before(record)
            self.puts.append(record)
            stored = self.storage.write(key, record)
            assert isinstance(stored, bool)
            return stored

        self._answer(future, apply)
        return future

    def get(self, key: bytes) -> asyncio.Future[Record | None]:
        future: asyncio.Future[Record | None] = asyncio.get_running_loop().create_future()
        if self.reads_fail:
            future.set_exception(PeerError(f"{self.url}: the read timed out"))
            return future
        self._answer(future, lambda: self.record)
        return future


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    made: list[Replica] = []

    def replica(url: str, record: Record | None = None) -> Replica:
        made.append(Replica(url, tmp_path, record))
        return made[-1]

    yield replica
    for one in made:
        one.storage.close()


class FakePeers(dict[str, Replica]):
    @property
    def by_url(self) -> dict[str, Replica]:
        return self


def coordinator(
    replicas: list[Replica],
    clock: HybridClock | None = None,
    ack: int = 2,
    peers: FakePeers | None = None,
) -> Coordinator:
    """`peers`: the peers it is given, when the test acts on them (by default, one for
    each of `replicas`)."""
    urls = [replica.url for replica in replicas]
    topology = SimpleNamespace(
        quorums=lambda key, count: [(urls, ack)],
        default_copies=lambda: len(urls),
        size=len(urls),
        targets=lambda key, copies: urls,
    )
    membership = SimpleNamespace(state=SimpleNamespace(epoch=1), topology=topology)
    peers = peers or FakePeers({replica.url: replica for replica in replicas})
    config = SimpleNamespace(self_url=SELF)
    hints = SimpleNamespace(add=lambda *args: None)
    clock = clock or HybridClock(lambda: WALL_MS)
    return Coordinator(config, None, membership, peers, clock, hints)  # type: ignore[arg-type]


async def test_a_replica_that_holds_this_very_write_already_is_not_a_reason_to_send_it_again(
    replicas: Callable[..., Replica],
) -> None:
    """A read repair (or a handoff, or anti-entropy) can bring a replica the write's own
    record from another replica before the write's call reaches it: the replica answers
    "kept" (an equal record is not stored again), and nothing newer is there."""
    a, b, c = replicas(A), replicas(B), replicas(C)
    c.hold = True  # the decision is A's and B's
    # A concurrent GET read A (the write already there) and repaired B before it.
    b.before_put = lambda record: b.storage.write(KEY, record)
    made = coordinator([a, b, c])
    outcome = await asyncio.wait_for(made.put(KEY, b"v", None), timeout=2)
    c.release()
    assert outcome.status is Status.STORED
    assert made.counters.restamped_writes == 0, "sent again though no replica held a newer one"
    assert len(a.puts) == 1


async def test_a_replica_repaired_with_this_write_at_a_wider_f_is_not_a_reason_either(
    replicas: Callable[..., Replica],
) -> None:
    """The replica that took the write first widened its F (it held the key at 3/3);
    a read repair carries that wider record to B, which then keeps it over the write's
    own (same version, narrower F)."""
    a, b, c = replicas(A), replicas(B), replicas(C)
    c.hold = True

    def repaired_first(record: Record) -> None:
        b.storage.write(KEY, Record.live(record.version, record.value, record.expires_at, 0))

    b.before_put = repaired_first
    made = coordinator([a, b, c])
    outcome = await asyncio.wait_for(made.put(KEY, b"v", None), timeout=2)
    c.release()
    assert outcome.status is Status.STORED
    assert made.counters.restamped_writes == 0


async def test_a_write_behind_a_newer_record_is_sent_again_and_wins(
    replicas: Callable[..., Replica],
) -> None:
    """The case rule 9.13 is for, as a control: A holds a newer record (a clock ahead)."""
    ahead = Record.live(version_at(WALL_MS + 30_000), b"earlier", 0, 3)
    a, b, c = replicas(A, ahead), replicas(B, ahead), replicas(C)
    made = coordinator([a, b, c])
    outcome = await asyncio.wait_for(made.put(KEY, b"later", None), timeout=2)
    assert outcome.status is Status.STORED
    assert made.counters.restamped_writes == 1
    assert a.record is not None and a.record.value == b"later"


async def test_a_replica_retired_between_two_rounds_fails_that_replica_not_the_request(
    replicas: Callable[..., Replica],
) -> None:
    """A membership step (to STABLE) retires the peers of nodes that left when it is
    applied, before it drains the operations placed by the step before: a write of that
    step sending its record again must not look a retired peer up and raise (a 500)."""
    ahead = Record.live(version_at(WALL_MS + 30_000), b"earlier", 0, 3)
    a, b, c = replicas(A, ahead), replicas(B), replicas(C)
    c.hold = True  # the leaving node answers late
    peers = FakePeers({replica.url: replica for replica in (a, b, c)})
    made = coordinator([a, b, c], peers=peers)
    a.hold = True
    write = asyncio.ensure_future(made.put(KEY, b"later", None))
    for _ in range(5):
        await asyncio.sleep(0)
    a.release()  # A kept the newer record, B stored: the decision; A is read next
    a.hold = True
    for _ in range(5):
        await asyncio.sleep(0)
    del peers[C]  # the step is applied while A's record is read
    a.release()
    outcome = await asyncio.wait_for(write, timeout=2)
    assert outcome.status is Status.STORED
    assert a.record is not None and a.record.value == b"later"


async def test_a_write_sent_again_past_every_kept_record_is_not_chased_by_concurrent_ones(
    replicas: Callable[..., Replica],
) -> None:
    """Once the coordinator heard every replica that kept a record in one decision, its
    clock is past every write acknowledged before this one began; a record kept over
    the write sent again then came from a write running meanwhile, and either order is
    right. Sending it again once more only makes that other write the one lost, and
    under contention on one key, with clocks in step, wrote keys up to 4 times."""
    ahead = Record.live(version_at(WALL_MS + 30_000), b"earlier", 0, 3)
    a, b, c = replicas(A, ahead), replicas(B), replicas(C)
    c.hold = True  # the decisions are A's and B's
    concurrent = Record.live(version_at(WALL_MS + 31_000), b"concurrent", 0, 3)
    puts_to_b = 0

    def meanwhile(record: Record) -> None:
        nonlocal puts_to_b
        puts_to_b += 1
        if puts_to_b == 2:  # another coordinator's write lands first on B this time
            b.storage.write(KEY, concurrent)
        else:
            b.before_put = meanwhile

    b.before_put = meanwhile
    made = coordinator([a, b, c])
    outcome = await asyncio.wait_for(made.put(KEY, b"later", None), timeout=2)
    c.release()
    assert outcome.status is Status.STORED
    assert len(a.puts) == 2, "sent again past a write running meanwhile"


async def test_a_write_whose_kept_record_is_never_heard_is_answered_504_not_201(
    replicas: Callable[..., Replica],
) -> None:
    """A keeps a newer record over every round and its reads fail, while B keeps one
    written meanwhile each round and is heard: the coordinator never hears every
    replica that kept one, so A's record may be an acknowledged write's that this one
    did not pass. After the last round the honest answer is 504 (it may or may not
    have taken effect), not an acknowledgement that could be false."""
    far_ahead = Record.live(version_at(WALL_MS + 50_000), b"earlier", 0, 3)
    a, b, c = replicas(A, far_ahead), replicas(B), replicas(C)
    a.reads_fail = True
    c.hold = True  # the decisions are A's and B's
    newer = iter(range(1, 100))

    def meanwhile(record: Record) -> None:
        ahead_of_it = Record.live(record.version + next(newer), b"meanwhile", 0, 3)
        b.storage.write(KEY, ahead_of_it)
        b.before_put = meanwhile

    b.before_put = meanwhile
    made = coordinator([a, b, c])
    outcome = await asyncio.wait_for(made.put(KEY, b"later", None), timeout=2)
    c.release()
    assert outcome.status is Status.NOT_ENOUGH_REPLICAS
    assert len(a.puts) == RESTAMPS + 1
    assert made.counters.restamped_writes == 1  # one write, sent again RESTAMPS times


async def test_a_record_kept_past_the_drift_bound_is_no_reason_to_send_again_nor_to_fail(
    replicas: Callable[..., Replica],
) -> None:
    """A replica holds a record a year ahead (a node whose clock was a year ahead wrote
    it before it was fenced). No node that keeps the drift bound took it, so it is no
    acknowledged write's, and reads ignore it (rule 8.4): the write is acknowledged as
    it was before writes were sent again, not answered 504 (found by
    tests/spec/test_dht_version_bound.py, when the skewed replica answered first)."""
    year_ahead = Record.live(version_at(WALL_MS + 365 * 86_400_000), b"future", 0, 3)
    a, b, c = replicas(A, year_ahead), replicas(B), replicas(C)
    made = coordinator([a, b, c])
    outcome = await asyncio.wait_for(made.put(KEY, b"today", None), timeout=2)
    assert outcome.status is Status.STORED
    assert len(a.puts) == 1 and made.counters.restamped_writes == 0
    assert b.record is not None and b.record.value == b"today"


async def test_a_record_past_the_bound_on_a_quorum_is_a_504_not_a_write_it_cannot_pass(
    replicas: Callable[..., Replica],
) -> None:
    """The other way round: this node's clock is 70 s behind the majority's (not fenced
    yet, or a cluster of two) and two replicas of three hold an acknowledged write
    stamped by it. This node cannot take that version (rule 8.4) nor pass it: a 201
    would be a write acknowledged and lost. Only C stored it: 504."""
    ahead = Record.live(version_at(WALL_MS + 70_000), b"acknowledged", 0, 3)
    a, b, c = replicas(A, ahead), replicas(B, ahead), replicas(C)
    made = coordinator([a, b, c])
    outcome = await asyncio.wait_for(made.put(KEY, b"later", None), timeout=2)
    assert outcome.status is Status.NOT_ENOUGH_REPLICAS
    assert a.record == ahead and b.record == ahead


async def test_a_record_past_the_bound_counted_in_the_decision_waits_for_another_replica(
    replicas: Callable[..., Replica],
) -> None:
    """A (past the bound) and B answered first; C answers later: the write is
    acknowledged once C stored it, by B and C."""
    year_ahead = Record.live(version_at(WALL_MS + 365 * 86_400_000), b"future", 0, 3)
    a, b, c = replicas(A, year_ahead), replicas(B), replicas(C)
    c.hold = True
    made = coordinator([a, b, c])
    write = asyncio.ensure_future(made.put(KEY, b"today", None))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not write.done(), "acknowledged by B alone"
    c.release()
    outcome = await asyncio.wait_for(write, timeout=2)
    assert outcome.status is Status.STORED
    assert c.record is not None and c.record.value == b"today"


async def test_a_late_replica_that_kept_a_record_past_the_bound_is_no_acknowledgement_either(
    replicas: Callable[..., Replica],
) -> None:
    """As above, a quorum (B and C) holds an acknowledged write 70 s past this node's
    bound, but A (with nothing) and B answer first and C later. C answers "kept": over
    a record past the bound, which is no acknowledgement of this write. Counting C's
    late answer as one acknowledged a write every read of a quorum loses (found by
    review: the late answers were counted whatever they said)."""
    ahead = Record.live(version_at(WALL_MS + 70_000), b"acknowledged", 0, 3)
    a, b, c = replicas(A), replicas(B, ahead), replicas(C, ahead)
    c.hold = True
    made = coordinator([a, b, c])
    write = asyncio.ensure_future(made.put(KEY, b"later", None))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not write.done(), "acknowledged by A alone"
    c.release()
    outcome = await asyncio.wait_for(write, timeout=2)
    assert outcome.status is Status.NOT_ENOUGH_REPLICAS
    assert b.record == ahead and c.record == ahead


async def test_a_replica_past_the_bound_unread_in_a_later_round_is_no_acknowledgement(
    replicas: Callable[..., Replica],
) -> None:
    """Five replicas, A = 3; an acknowledged write 70 s past this node's bound sits on
    C, D and E, and B holds a record 30 s ahead. The first decision is A (stored), B
    (kept, read and passed) and C (kept, past the bound): this node heard every replica
    it could pass and sends the write again. The second decision is A and B (stored)
    and D (kept, never read): D kept the same record C did, which this write cannot
    pass, so it is no acknowledgement, and with C and E keeping it too only two
    replicas stored the write: 504, not a 201 that every quorum read loses (found by
    review: once "caught up", a kept answer was counted whatever it was kept over)."""
    past_bound = Record.live(version_at(WALL_MS + 70_000), b"acknowledged", 0, 5)
    within = Record.live(version_at(WALL_MS + 30_000), b"earlier", 0, 5)
    a, b = replicas(A), replicas(B, within)
    c, d, e = (replicas(url, past_bound) for url in ("http://c", "http://d", "http://e"))
    d.hold = e.hold = True  # not in the first decision
    d_put, c_get = d.put, c.get

    def d_answers_from_now_on(key: bytes, record: Record) -> asyncio.Future[bool]:
        future = d_put(key, record)
        d.hold = False
        return future

    def c_holds_from_now_on(key: bytes) -> asyncio.Future[Record | None]:
        future = c_get(key)
        c.hold = True
        return future

    d.put = d_answers_from_now_on  # type: ignore[method-assign]
    c.get = c_holds_from_now_on  # type: ignore[method-assign]
    made = coordinator([a, b, c, d, e], ack=3)
    write = asyncio.ensure_future(made.put(KEY, b"later", None))
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(a.puts) == 2, "the write was not sent again"
    assert not write.done(), "acknowledged by A, B and D, which kept a record past the bound"
    c.release()
    d.release()
    e.release()
    outcome = await asyncio.wait_for(write, timeout=2)
    assert outcome.status is Status.NOT_ENOUGH_REPLICAS
    assert [r.record for r in (c, d, e)] == [past_bound] * 3


async def test_a_write_whose_only_replica_kept_a_record_past_the_bound_is_a_504(
    tmp_path: Path,
) -> None:
    """A write whose only replica is this node (a one-node ring, `1/1` on the key's
    owner) over a record past the drift bound held here (a handoff keeps a keeper's
    newest copy without moving the clock): this node cannot pass it, and no replica
    stored the write. It was answered 201 after the last round (found by review:
    `_learn_versions` returns a pair, always true, where `_write_here` tested for
    none heard)."""
    storage = Storage(tmp_path / "self", durability="none")
    try:
        year_ahead = Record.live(version_at(WALL_MS + 365 * 86_400_000), b"future", 0, 1)
        storage.write(KEY, year_ahead)
        topology = SimpleNamespace(
            quorums=lambda key, count: [([SELF], 1)], default_copies=lambda: 1, size=1
        )
        membership = SimpleNamespace(state=SimpleNamespace(epoch=1), topology=topology)
        made = Coordinator(
            SimpleNamespace(self_url=SELF),  # type: ignore[arg-type]
            storage,
            membership,  # type: ignore[arg-type]
            FakePeers(),  # type: ignore[arg-type]
            HybridClock(lambda: WALL_MS),
            SimpleNamespace(add=lambda *args: None),  # type: ignore[arg-type]
        )
        outcome = await asyncio.wait_for(made.put(KEY, b"today", None), timeout=2)
        assert outcome.status is Status.NOT_ENOUGH_REPLICAS
        deleted = await asyncio.wait_for(made.delete(KEY, None), timeout=2)
        assert deleted.status is Status.NOT_ENOUGH_REPLICAS, "a delete acknowledged, not done"
        assert storage.get(KEY) == year_ahead
    finally:
        storage.close()
