"""The simulator itself (`dht.simulation`): a seed replays to the same trace, and a
cluster with no fault passes the history checker."""

from __future__ import annotations

from dht.simulation.run import Settings, simulate


def test_a_seed_replays_to_the_same_trace() -> None:
    settings = Settings(seed=11, seconds=20, faults=False)
    first = simulate(settings)
    second = simulate(settings)
    assert first.operations > 50
    assert first.trace_hash == second.trace_hash
    assert (first.verdict, first.faults) == (second.verdict, second.faults)


def test_a_cluster_without_faults_keeps_every_acknowledged_write() -> None:
    result = simulate(Settings(seed=3, seconds=30, faults=False))
    assert result.operations > 100
    assert result.ok, result.verdict + "\n" + result.details
