"""A 16 MiB value across a slow link to one replica (SPEC 9.1): every link into node 3
carries 10 MiB/s both ways, so the value takes about 1.6 s to cross, past the 1 s
deadline of a plain call. A write gets its size at 8 MiB/s on top from the start; a
read, whose answer does not announce its size, earns the same time from the bytes of the
answer as they arrive. Either way the healthy replica answers in time and is not counted
as failed. The figures are printed (pytest -s)."""

from __future__ import annotations

import time

from dht.conformance.rules import rule
from tests.fixtures import ChaosClusterFactory

TIMEOUT = 1.0  # --timeout, the default
VALUE = bytes(range(256)) * (16 * 1024 * 1024 // 256)  # 16 MiB, the largest value
RATE = 10 * 1024  # KB/s on the slow links: 16 MiB in ~1.6 s
SLOW = 2  # node 3


@rule("9.1")
def test_a_large_value_crosses_a_slow_link_to_a_replica_within_its_deadline_both_ways(
    start_chaos_cluster: ChaosClusterFactory,
) -> None:
    cluster, testbed = start_chaos_cluster(3, ["--timeout", str(TIMEOUT)])
    coordinator, slow = cluster[0], cluster[SLOW]
    links = testbed.links_into(SLOW)
    for stream in ("upstream", "downstream"):
        testbed.add_toxic(links, "bandwidth", stream=stream, rate=RATE)

    started = time.monotonic()
    put = coordinator.put("large", VALUE, "3/3")
    put_seconds = time.monotonic() - started
    started = time.monotonic()
    get = coordinator.get("large", "3/3")
    get_seconds = time.monotonic() - started
    timeouts = coordinator.metrics().value(
        "dht_replica_calls_total", peer=slow.cluster_url, outcome="timeout"
    )
    print(
        f"\n16 MiB over a {RATE // 1024} MiB/s link, 3/3: PUT {put.status} in "
        f"{put_seconds:.2f}s, GET {get.status} in {get_seconds:.2f}s; "
        f"calls to the slow replica timed out: {timeouts:.0f}"
    )
    assert put.status == 201, put.text
    assert get.status == 200, get.text
    assert get.body == VALUE
    assert timeouts == 0
    # The link is slow enough that the value could not cross within a plain deadline.
    assert get_seconds > TIMEOUT, f"the read took {get_seconds:.2f}s: the link is not slow"
