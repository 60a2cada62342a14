"""SPEC.md rule 9.10: how long an exchange goes on copying a dead record to a peer that
holds no record of the key (dht.replication.anti_entropy.withheld_after_ms)."""

from __future__ import annotations

from dht.replication.anti_entropy import withheld_after_ms

SECOND = 1_000


def test_a_tombstone_is_withheld_after_the_grace_and_half_the_grace_plus_twice_the_drift() -> None:
    assert withheld_after_ms(86_400 * SECOND, 60 * SECOND) == 86_400 * SECOND
    assert withheld_after_ms(240 * SECOND, 60 * SECOND) == 240 * SECOND
    assert withheld_after_ms(60 * SECOND, 60 * SECOND) == 150 * SECOND
    assert withheld_after_ms(1 * SECOND, 250) == 1 * SECOND


def test_no_hint_of_an_older_value_lands_after_its_tombstone_is_withheld() -> None:
    """The worst case the drift bound allows: this node 2 x drift ahead of the clock
    that stamped the tombstone (each clock within the drift of the majority's, rule
    9.13), and a hint of the older value made as late as the delete, kept half the
    grace (rule 9.6). In real time after the delete, the tombstone is withheld from a
    peer without the key no sooner than the last moment such a hint can land there."""
    for grace in (1 * SECOND, 8 * SECOND, 60 * SECOND, 240 * SECOND, 86_400 * SECOND):
        for drift in (250, 20 * SECOND, 60 * SECOND, 600 * SECOND):
            withheld_real = withheld_after_ms(grace, drift) - 2 * drift
            last_hint_real = grace // 2
            assert withheld_real >= last_hint_real, (grace, drift)
