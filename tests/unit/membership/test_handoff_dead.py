"""Which records a node hands off, and to whom, when a change names dead nodes
(dht/membership/rebalance.py `_move`; SPEC.md rule 13.8). Pure: rings and records only."""

from __future__ import annotations

from dht.membership.rebalance import Rebalance
from dht.model.record import Record
from dht.model.ring import Ring

NODES = [f"http://127.0.0.1:{port}" for port in (9001, 9002, 9003, 9004)]
DEAD = NODES[0]
OLD, NEW = Ring(NODES, 16), Ring(NODES[1:], 16)


def as_node(url: str) -> Rebalance:
    handoff = Rebalance.__new__(Rebalance)  # `_move` needs nothing but the node's URL
    handoff._self_url = url
    return handoff


def a_key_moving_to_a_new_owner() -> tuple[bytes, list[str], list[str]]:
    """A key the dead node held (F=3), with its old and new replicas."""
    for index in range(1000):
        key = f"k{index}".encode()
        held, owners = OLD.replicas_for(key, 3), NEW.replicas_for(key, 3)
        if DEAD in held and set(owners) - set(held):
            return key, held, owners
    raise AssertionError("no such key")


def test_only_the_first_keeper_sends_the_newest_copy_and_reads_the_others() -> None:
    key, held, owners = a_key_moving_to_a_new_owner()
    keepers = [url for url in held if url in owners]
    (receiver,) = set(owners) - set(held)
    record = Record.live(1, b"v", copies=3)
    first = as_node(keepers[0])._move(key, record, NEW, OLD, frozenset({DEAD}))
    assert first is not None
    assert (first.receivers, first.confirm_with) == ([receiver], tuple(keepers[1:]))
    other = as_node(keepers[1])._move(key, record, NEW, OLD, frozenset({DEAD}))
    assert other is not None and other.unless_held_by == keepers[0]
    assert other.receivers == [receiver, keepers[0]]


def test_a_new_owner_holding_the_key_never_sends_to_itself() -> None:
    """Found by review: a new owner that already had the key (a write at 1/3 during the
    change) was among its own receivers, and the handoff task died on it."""
    key, held, owners = a_key_moving_to_a_new_owner()
    (receiver,) = set(owners) - set(held)
    move = as_node(receiver)._move(key, Record.live(2, b"w", copies=3), NEW, OLD, frozenset({DEAD}))
    assert move is not None and receiver not in move.receivers
    keepers = [url for url in held if url in owners]
    assert move.receivers == [keepers[0]] and move.unless_held_by == keepers[0]


def test_a_dead_node_of_the_new_list_is_handed_nothing() -> None:
    staying_dead = NODES[3]
    for index in range(200):
        key = f"k{index}".encode()
        held = OLD.replicas_for(key, 3)
        for url in held:
            if url in (DEAD, staying_dead):
                continue
            move = as_node(url)._move(
                key, Record.live(1, b"v", copies=3), NEW, OLD, frozenset({DEAD, staying_dead})
            )
            if move is not None:
                assert staying_dead not in move.receivers, (key, move)
                assert staying_dead not in move.confirm_with
                assert move.unless_held_by != staying_dead
