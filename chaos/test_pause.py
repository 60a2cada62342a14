"""A paused node (SPEC.md rule 9.11): SIGSTOP freezes a node as a long garbage-collection
pause would. Its sockets stay open and the kernel still accepts connections for it, so
peers see no refusal, only silence: every call to it runs into the deadline.

4 client threads write, delete and read 16 keys at the default quorum (2/3) through the
two other nodes, before, during and after a pause of DHT_PAUSE_SECONDS (default 3).
Checked: every request during the pause succeeds; both peers open their circuit to the
paused node; once it resumes it catches up (hints, and the calls its socket buffers held)
with no read of any key; and the history checker finds nothing lost or stale. The run
leaves a run folder with its plot. Run with -s to see the figures.
"""

from __future__ import annotations

import os
import statistics
import time

from chaos.flags import FAST_FAULTS
from chaos.observe import breaker_towards, differences, pending_hints, records_by_node
from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import wait_for
from dht.conformance.rules import rule
from dht.conformance.traffic import Clients, Mix, final_read, key_space
from dht.history.checker import check
from dht.history.run_folder import FaultWindow, Run, new_run_dir, write_run

PAUSE_SECONDS = float(os.environ.get("DHT_PAUSE_SECONDS", "3"))
SEED = 11
KEYS = key_space(16)
# Generous: a request during the pause needs no answer from the paused node, so it waits
# on no deadline; this only keeps a busy machine from turning a slow answer into a miss.
CLIENT_TIMEOUT = 5.0
CATCH_UP_DEADLINE = 20.0


@rule("9.11")
def test_a_paused_node_is_routed_around_and_catches_up_once_it_resumes(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, FAST_FAULTS)
    live, paused = [cluster[0], cluster[1]], cluster[2]
    mix = Mix(expiring=0.0)  # no expiry: the catch-up check compares records as they are
    clients = Clients(live, KEYS, 4, SEED, CLIENT_TIMEOUT, mix).start()
    try:
        time.sleep(1.0)  # traffic before the fault
        paused_at = time.monotonic()
        paused.pause()
        try:
            opened = wait_for(
                lambda: [breaker_towards(node, paused) == "open" for node in live],
                all,
                deadline=PAUSE_SECONDS,
            )
            circuits_open_after = time.monotonic() - paused_at
            time.sleep(max(0.0, PAUSE_SECONDS - circuits_open_after))  # the fault's lifetime
            hints_at_resume = [pending_hints(node, paused) for node in live]
        finally:
            paused.resume()
        resumed_at = time.monotonic()
    finally:
        history = clients.stop()  # no read from here on: the catch-up is not read repair
    stopped_at = time.monotonic()
    assert all(opened), "the peers' circuits to the paused node did not open"

    during = [op for op in history if paused_at <= op.invoked < resumed_at]
    failed = [op for op in during if op.status not in (200, 201, 202, 404)]
    latencies = sorted(op.settled_by - op.invoked for op in during if op.completed is not None)

    wait_for(
        lambda: differences(records_by_node(cluster.nodes)),
        lambda diverging: not diverging,
        deadline=CATCH_UP_DEADLINE,
    )
    caught_up_after = time.monotonic() - stopped_at
    statuses = [node.status() for node in live]
    timeouts = [
        node.metrics().value("dht_replica_calls_total", peer=paused.url, outcome="timeout")
        for node in live
    ]

    reads = {key: final_read(live[index % 2], key) for index, key in enumerate(KEYS)}
    final = {key: value for key, (value, _) in reads.items()}
    final_at = {key: seen for key, (_, seen) in reads.items()}
    report = check(history, final, final_at=final_at)
    window = FaultWindow("pause (SIGSTOP) node3", paused_at, resumed_at)
    details = {"pause_seconds": PAUSE_SECONDS, "seed": SEED, "client_timeout": CLIENT_TIMEOUT}
    plot = write_run(
        new_run_dir("pause"), Run("pause", history, [window], final, final_at, details)
    )
    print(
        f"\npaused {resumed_at - paused_at:.2f}s: {len(during)} requests during the pause, "
        f"{len(failed)} failed; latency p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms; circuits open {circuits_open_after:.2f}s after "
        f"the pause; calls timed out {timeouts}; hints pending at resume {hints_at_resume}, "
        f"delivered {[s['hints_delivered'] for s in statuses]}; replicas equal "
        f"{caught_up_after:.2f}s after the traffic stopped\nhistory: {report.summary()}"
        f"\nrun folder: {plot.parent}"
    )
    assert during and not failed, [str(op) for op in failed[:10]]
    assert sum(hints_at_resume) > 0, "no write left a hint while the node was paused"
    assert report.ok, report.details()
