"""Which `replicas` a simulated client sends, and which of its reads must see which
writes (`dht.simulation.quorums`): SPEC rule 3.5's A_read + A_write > F, on the first
nodes of one preference list."""

from __future__ import annotations

import random

from dht.model.replicas import parse_replicas
from dht.simulation.quorums import Overlap, choose, meet


def test_a_read_meets_a_write_when_their_acks_exceed_the_larger_from() -> None:
    assert meet("2/3", "2/3", 3)
    assert meet("1/3", "3/3", 3)
    assert meet("2/3", "2/2", 3)  # the 2/2 write's nodes are the first two of the three
    assert meet("1/2", "2/2", 3)
    assert not meet("1/3", "2/3", 3)
    assert not meet("1/3", "2/2", 3)  # the read's one node may be the third
    assert not meet("1/1", "1/3", 3)


def test_the_default_is_a_majority_of_the_ring() -> None:
    assert meet(None, None, 3)
    assert meet(None, "2/2", 3)
    assert not meet(None, "1/3", 3)
    assert not meet("1/3", None, 3)
    assert meet("2/3", None, 4)  # 3 of 4 leave out one node: not both the read's two
    assert not meet("1/4", None, 4)


def test_a_from_past_the_ring_takes_all_of_its_nodes() -> None:
    """A request sent with the old size during a shrink: every node of the smaller ring,
    each needed (SPEC 13.3)."""
    assert meet("1/3", "1/1", 2)
    assert meet("3/3", "1/2", 2)


def test_a_run_whose_ring_changed_size_needs_the_quorums_to_meet_on_each() -> None:
    assert Overlap([3, 4])("2/3", None)
    assert Overlap([3])("2/2", None)
    assert not Overlap([3, 5])("2/2", None)  # 2 + 3 of 5


def test_a_choice_is_the_default_or_a_valid_count_within_the_cluster() -> None:
    rng = random.Random(1)
    choices = [choose(rng, 3, majorities_only=False) for _ in range(2000)]
    explicit = {text for text in choices if text is not None}
    assert 800 < choices.count(None) < 1200
    assert explicit == {"1/1", "1/2", "2/2", "1/3", "2/3", "3/3"}
    assert all(parse_replicas(text, 3) for text in explicit)


def test_with_membership_changes_a_choice_is_a_majority() -> None:
    rng = random.Random(2)
    explicit = {choose(rng, 3, majorities_only=True) for _ in range(500)} - {None}
    assert explicit == {"1/1", "2/2", "2/3", "3/3"}
