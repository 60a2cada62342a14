"""What the nodes' `/v0/status` says of anti-entropy (pure): the records exchanges copied
and where to, whether every pair of nodes is in sync, and the leaves they found
differing. Read by the anti-entropy benchmark (bench.anti_entropy)."""

from __future__ import annotations

from typing import Any

from dht.model.merkle import LEAVES

Status = dict[str, Any]  # a node's /v0/status
Statuses = dict[str, Status]  # by node URL
Pair = tuple[str, str]  # (node, peer): the exchanges `node` started with `peer`


def exchange_stats(statuses: Statuses) -> dict[Pair, dict[str, Any]]:
    """Every node's `anti_entropy` block per peer, by (node, peer)."""
    return {
        (node, peer): block["anti_entropy"]
        for node, status in statuses.items()
        for peer, block in status["peers"].items()
    }


def landed(statuses: Statuses, target: str) -> int:
    """Records anti-entropy copied into `target`: those it pulled in the exchanges it
    started, plus those its peers pushed in theirs. Each copy is counted once, by the side
    that started the exchange and only if the record was stored (it was newer)."""
    pulled = sum(p["anti_entropy"]["records_received"] for p in statuses[target]["peers"].values())
    pushed = sum(
        status["peers"][target]["anti_entropy"]["records_sent"]
        for node, status in statuses.items()
        if node != target
    )
    return int(pulled + pushed)


def copied(statuses: Statuses) -> tuple[int, int]:
    """(records sent, records received) summed over every node and peer: each record an
    exchange copied is in exactly one of the two."""
    stats = exchange_stats(statuses).values()
    return sum(s["records_sent"] for s in stats), sum(s["records_received"] for s in stats)


def in_sync(before: Statuses, now: Statuses) -> bool:
    """Every node has completed, since `before`, an exchange with every peer that found
    no leaf differing: their trees agreed when it began. With no writes meanwhile, the
    cluster holds the same records everywhere. A node missing from `before` (restarted
    since) counts from zero exchanges."""
    old = exchange_stats(before)
    for pair, stats in exchange_stats(now).items():
        earlier = old.get(pair, {}).get("exchanges", 0)
        if not (stats["exchanges"] > earlier and stats["leaves_differing"] == 0):
            return False
    return True


def busiest(
    seen: dict[Pair, tuple[int, int]], statuses: Statuses, baseline: dict[Pair, int]
) -> None:
    """Keeps, per (node, peer), the (leaves compared, leaves differing) of the completed
    exchange with the most differing leaves since `baseline` (exchanges counted then):
    `/v0/status` shows only the last exchange, so polling catches the one that worked."""
    for pair, stats in exchange_stats(statuses).items():
        if stats["exchanges"] <= baseline.get(pair, 0):
            continue
        figures = (stats["leaves_compared"], stats["leaves_differing"])
        if pair not in seen or figures[1] > seen[pair][1]:
            seen[pair] = figures


def expected_differing_leaves(changed: int, leaves: int = LEAVES) -> float:
    """How many of `leaves` leaves `changed` keys spread at random fall into (the
    expected count of non-empty bins)."""
    return leaves * (1 - (1 - 1 / leaves) ** changed)
