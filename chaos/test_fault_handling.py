"""Fault handling through real Toxiproxy faults (SPEC.md section 4): deadlines, 504 as soon
as success is impossible, circuit breakers and their 503 fallback, partitions, overload.

Node 3 (index 2) is the faulty shard unless said otherwise: every link into it carries the
fault, so nodes 1 and 2 see it slow, silent, reset, trickling or gone. Elapsed-time bounds
carry margins for a loaded 2-core machine; the figures are printed (pytest -s).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from chaos.observe import status
from tests.fixtures import ChaosClusterFactory
from tests.launcher import Node, Response, wait_for

TIMEOUT = 0.5  # --timeout: one replica request's deadline
COOLDOWN = 1.0  # --breaker-cooldown
THRESHOLD = 3  # --breaker-threshold
MARGIN = 0.7  # scheduling slack on a loaded machine, on top of the deadline
FAST = 0.25  # an answer that waited on no deadline
FAULTY = 2
SETTINGS = [
    "--timeout",
    str(TIMEOUT),
    "--breaker-cooldown",
    str(COOLDOWN),
    "--breaker-threshold",
    str(THRESHOLD),
    "--hint-interval",
    "0.2",
]
# Tests that send more failing requests than THRESHOLD keep the circuit closed this way.
NO_BREAKER = ["--timeout", str(TIMEOUT), "--breaker-threshold", "1000"]


def timed(call: Callable[[], Response]) -> tuple[Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def breaker_towards(node: Node, target: Node) -> str:
    return str(status(node)["peers"][target.cluster_url]["breaker"])


def test_dead_shard_gives_504_then_fast_503_then_recovers_after_the_cooldown(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    cluster, testbed = start_chaos_cluster(3, SETTINGS)
    coordinator, dead = cluster[0], cluster[FAULTY]
    testbed.cut(testbed.links_into(FAULTY))

    for attempt in range(THRESHOLD):
        response, elapsed = timed(lambda i=attempt: coordinator.put(f"dead-{i}", b"v", "3/3"))
        assert response.status == 504, response.text
        assert "Not Enough Replicas" in response.text
        assert elapsed < TIMEOUT + MARGIN
    assert breaker_towards(coordinator, dead) == "open"

    response, to_503 = timed(lambda: coordinator.put("dead-open", b"v", "3/3"))
    assert response.status == 503, response.text
    assert 1 <= int(response.header("Retry-After") or "0") <= COOLDOWN + 1
    assert to_503 < FAST
    get, get_503 = timed(lambda: coordinator.get("dead-open", "3/3"))
    assert get.status == 503
    assert get_503 < FAST
    # A quorum that does not need the dead shard still works while its circuit is open.
    assert coordinator.put("dead-quorum", b"v", "2/3").status == 201

    testbed.heal()
    healed = time.monotonic()
    recovered = wait_for(
        lambda: coordinator.put("dead-back", b"v", "3/3"),
        lambda answer: answer.status == 201,
        deadline=COOLDOWN + 5.0,
    )
    to_recover = time.monotonic() - healed
    assert recovered.status == 201
    assert breaker_towards(coordinator, dead) == "closed"
    assert coordinator.get("dead-back", "3/3").status == 200
    print(
        f"\ndead shard: 503 in {to_503 * 1000:.1f} ms once open; recovered {to_recover:.2f}s "
        f"after the heal (cooldown {COOLDOWN}s)"
    )


FAULTS = {
    "slow": ("latency", {"latency": 3000}),
    "silent": ("timeout", {"timeout": 0}),
    "reset": ("reset_peer", {"timeout": 0}),
}


@pytest.mark.parametrize("fault", FAULTS.keys())
def test_faulty_shard_fails_all_replicas_requests_within_the_deadline_and_spares_quorums(
    start_chaos_cluster: ChaosClusterFactory, fault: str
) -> None:
    cluster, testbed = start_chaos_cluster(3, NO_BREAKER)
    coordinator = cluster[0]
    assert coordinator.put("faulty", b"before", "3/3").status == 201
    kind, attributes = FAULTS[fault]
    testbed.add_toxic(testbed.links_into(FAULTY), kind, **attributes)

    put, put_all = timed(lambda: coordinator.put("faulty", b"after", "3/3"))
    get, get_all = timed(lambda: coordinator.get("faulty", "3/3"))
    assert (put.status, get.status) == (504, 504)
    assert put_all < TIMEOUT + MARGIN
    assert get_all < TIMEOUT + MARGIN

    put, put_quorum = timed(lambda: coordinator.put("faulty", b"quorum", "2/3"))
    get, get_quorum = timed(lambda: coordinator.get("faulty", "2/3"))
    assert put.status == 201
    assert (get.status, get.body) == (200, b"quorum")
    assert put_quorum < FAST
    assert get_quorum < FAST
    print(
        f"\n{fault} shard: 3/3 answered 504 in {put_all:.2f}s (PUT) / {get_all:.2f}s (GET); "
        f"2/3 in {put_quorum * 1000:.0f} / {get_quorum * 1000:.0f} ms"
    )


def test_trickling_shard_does_not_hold_requests_past_the_deadline(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    """A shard that accepts and answers, but a few bytes at a time, both ways."""
    cluster, testbed = start_chaos_cluster(3, NO_BREAKER)
    coordinator = cluster[0]
    value = bytes(range(256)) * 800  # 200 KiB
    assert coordinator.put("trickle", value, "3/3").status == 201
    links = testbed.links_into(FAULTY)
    testbed.add_toxic(links, "bandwidth", stream="upstream", rate=1)  # KB/s
    testbed.add_toxic(links, "slicer", average_size=16, size_variation=0, delay=20_000)

    put, put_elapsed = timed(lambda: coordinator.put("trickle", value[::-1], "3/3"))
    get, get_elapsed = timed(lambda: coordinator.get("trickle", "3/3"))
    assert (put.status, get.status) == (504, 504)
    assert put_elapsed < TIMEOUT + MARGIN
    assert get_elapsed < TIMEOUT + MARGIN
    get = coordinator.get("trickle", "2/3")
    assert (get.status, get.body) == (200, value[::-1])
    print(f"\ntrickling shard: 504 in {put_elapsed:.2f}s (PUT) / {get_elapsed:.2f}s (GET)")


def test_partition_of_one_node_leaves_quorum_requests_working_on_the_majority(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    cluster, testbed = start_chaos_cluster(3, SETTINGS)
    majority, minority = cluster[0], cluster[FAULTY]
    testbed.isolate(FAULTY)

    for index in range(10):
        key = f"partition-{index}"
        assert majority.put(key, b"majority").status == 201
        assert cluster[1].get(key).status == 200
        assert cluster[1].get(key).body == b"majority"
        refused, elapsed = timed(lambda k=key: minority.put(k, b"minority"))
        assert refused.status in (503, 504), refused.text
        assert elapsed < TIMEOUT + MARGIN
    assert minority.get("partition-0").status in (503, 504)

    testbed.heal()
    healed = wait_for(
        lambda: minority.put("partition-healed", b"v"),
        lambda answer: answer.status == 201,
        deadline=COOLDOWN + 5.0,
    )
    assert healed.status == 201
    assert minority.get("partition-3").body == b"majority"


def test_overload_burst_gets_fast_503s_and_the_node_recovers(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    """Every request through node 1 waits ~1 s on its slowed peers, so requests pile up
    against --max-in-flight; a burst far above it must be refused at once, not queued."""
    cap, burst = 8, 120
    cluster, testbed = start_chaos_cluster(
        3, ["--timeout", "3", "--max-in-flight", str(cap), "--breaker-threshold", "1000"]
    )
    node = cluster[0]
    testbed.add_toxic(testbed.links_out_of(0), "latency", latency=1000)

    def one(index: int) -> tuple[int, float]:
        response, elapsed = timed(lambda: node.put(f"burst-{index}", b"v"))
        return response.status, elapsed

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=burst) as pool:
        results = list(pool.map(one, range(burst)))
    wall = time.monotonic() - started
    codes = Counter(code for code, _ in results)
    refusals = [elapsed for code, elapsed in results if code == 503]
    assert set(codes) <= {201, 503}, codes
    assert codes[201] >= 1
    assert len(refusals) >= burst // 2, codes
    assert max(refusals) < 0.5, "a refusal waited: requests queue instead of being refused"
    assert wall < 1.0 + 3 * MARGIN + 2.0, "the burst was not bounded by the cap"
    assert int(status(node)["overload_refusals"]) == len(refusals)

    testbed.heal()
    wait_for(lambda: status(node)["in_flight"], lambda count: count == 0)
    assert node.put("after-burst", b"v").status == 201
    refusals.sort()
    print(
        f"\noverload: {codes[201]} served, {len(refusals)} refused (median "
        f"{refusals[len(refusals) // 2] * 1000:.0f} ms, max {refusals[-1] * 1000:.0f} ms), "
        f"burst done in {wall:.2f}s"
    )
