"""The namespace test bed (dht/testbed/netns.py): nodes that know nothing of proxies get
a Toxiproxy link on every directed pair all the same, and nothing of it outlives the
harness, however the harness ends.

The nodes are tests/data/plain_node.py: a few lines of http.server bound to 127.0.0.1
only, which fetch a peer's URL on request, as a course project's node would dial it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.pinned_namespaces import PinnedNamespaces
from dht.conformance.http_client import wait_for
from dht.testbed.netns import NetnsTestbed, netns_unavailable
from dht.testbed.toxiproxy import free_ports

PLAIN_NODE = Path(__file__).resolve().parents[1] / "tests" / "data" / "plain_node.py"
LATENCY_MS = 400

unavailable = netns_unavailable()
pytestmark = pytest.mark.skipif(unavailable is not None, reason=unavailable or "")


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def fetch(testbed: NetnsTestbed, source: int, url: str) -> tuple[int, str]:
    """Node `source` dials `url` from its namespace; its answer, via the harness's URL."""
    query = urllib.parse.urlencode({"url": url})
    return get(f"http://127.0.0.1:{testbed.ports[source]}/fetch?{query}")


def start_plain_nodes(testbed: NetnsTestbed) -> list[subprocess.Popen[bytes]]:
    nodes = [
        testbed.popen(index, [sys.executable, str(PLAIN_NODE), str(index), str(port)])
        for index, port in enumerate(testbed.ports)
    ]
    for port in testbed.ports:
        wait_for(lambda port=port: get(f"http://127.0.0.1:{port}/", 0.5)[0], lambda s: s == 200)
    return nodes


def footprint(testbed: NetnsTestbed) -> dict[str, Any]:
    """What of the test bed could outlive it: its processes, the holders of its
    namespaces and the root namespace's veth."""
    holders = [
        namespace.holder.pid for namespace in [*testbed.namespaces, testbed.hub] if namespace
    ]
    servers = [server.process.pid for server in testbed.servers if server.process]
    return {
        "pids": holders + servers + [process.pid for process in testbed.processes],
        "holders": holders,
        "uplink": testbed.uplink,
    }


def leftovers(seen: dict[str, Any], namespaces: PinnedNamespaces) -> list[str]:
    """What of `seen` still runs: a live process, a process in one of the namespaces
    (pinned, so that no other test bed's can take their inodes meanwhile)."""
    found = []
    for pid in seen["pids"]:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            continue
        if state != "Z":  # a zombie holds no namespace; its parent reaps it
            found.append(f"process {pid}")
    found += [f"process {pid} in a test bed namespace" for pid in namespaces.occupants()]
    return found


def uplink_left(seen: dict[str, Any]) -> bool:
    """Whether the root namespace's veth is still there: it goes with the hub's
    namespace, so only once no one holds that namespace any more."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return bool(seen["uplink"]) and f" {seen['uplink']}@" in links


@pytest.fixture(scope="module")
def testbed() -> Iterator[NetnsTestbed]:
    testbed = NetnsTestbed(free_ports(3)).start()
    try:
        start_plain_nodes(testbed)
        yield testbed
    finally:
        testbed.stop()


@pytest.fixture(autouse=True)
def healed(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "testbed" in request.fixturenames:
        request.getfixturevalue("testbed").heal()


def test_the_harness_reaches_each_node_at_its_loopback_url(testbed: NetnsTestbed) -> None:
    for index, port in enumerate(testbed.ports):
        assert get(f"http://127.0.0.1:{port}/") == (200, f"node {index}")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_node_reaches_each_peer_at_its_loopback_url(testbed: NetnsTestbed, host: str) -> None:
    for source in range(3):
        for target, port in enumerate(testbed.ports):
            if source != target:
                status, body = fetch(testbed, source, f"http://{host}:{port}/")
                assert status == 200 and body.endswith(f" node {target}"), body


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_cutting_a_link_breaks_that_direction_only(testbed: NetnsTestbed, host: str) -> None:
    port = testbed.ports
    testbed.cut([testbed.links[0, 1]])
    assert fetch(testbed, 0, f"http://{host}:{port[1]}/")[0] == 502
    assert fetch(testbed, 1, f"http://{host}:{port[0]}/")[0] == 200
    assert fetch(testbed, 0, f"http://{host}:{port[2]}/")[0] == 200
    assert get(f"http://127.0.0.1:{port[1]}/")[0] == 200  # the harness's way in is no link


def test_a_latency_toxic_delays_its_link_only(testbed: NetnsTestbed) -> None:
    port = testbed.ports
    testbed.add_toxic([testbed.links[0, 2]], "latency", latency=LATENCY_MS)
    slow = float(fetch(testbed, 0, f"http://127.0.0.1:{port[2]}/")[1].split()[2])
    fast = float(fetch(testbed, 0, f"http://127.0.0.1:{port[1]}/")[1].split()[2])
    assert slow >= LATENCY_MS / 1000 > fast


def test_heal_restores_every_link(testbed: NetnsTestbed) -> None:
    testbed.isolate(1)
    testbed.add_toxic([testbed.links[0, 2]], "latency", latency=LATENCY_MS)
    assert fetch(testbed, 1, f"http://127.0.0.1:{testbed.ports[2]}/")[0] == 502
    testbed.heal()
    for source in range(3):
        for target, port in enumerate(testbed.ports):
            if source != target:
                status, body = fetch(testbed, source, f"http://127.0.0.1:{port}/")
                assert status == 200 and float(body.split()[2]) < LATENCY_MS / 1000, body


def test_heal_restarts_a_namespace_toxiproxy_that_stopped_answering(
    testbed: NetnsTestbed,
) -> None:
    testbed.cut([testbed.links[2, 0]])
    process = testbed.servers[2].process
    assert process is not None
    process.send_signal(signal.SIGSTOP)
    restarts = len(testbed.restarts)
    testbed.heal(reset_timeout=1.0)
    # Another server may be restarted too: on a loaded machine a healthy one can take
    # more than the second given here to answer its reset.
    assert testbed.servers[2].process is not process and len(testbed.restarts) > restarts
    wait_for(
        lambda: fetch(testbed, 2, f"http://127.0.0.1:{testbed.ports[0]}/"), lambda a: a[0] == 200
    )
    testbed.cut([testbed.links[2, 0]])  # the new server's links take faults as before
    assert fetch(testbed, 2, f"http://127.0.0.1:{testbed.ports[0]}/")[0] == 502


def test_a_node_stopped_through_its_pid_answers_nothing_until_continued() -> None:
    testbed = NetnsTestbed(free_ports(2)).start()
    try:
        node = start_plain_nodes(testbed)[1]
        url = f"http://127.0.0.1:{testbed.ports[1]}/"
        node.send_signal(signal.SIGSTOP)
        assert get(url, timeout=0.5)[0] == 0
        node.send_signal(signal.SIGCONT)
        assert get(url) == (200, "node 1")
        node.kill()  # the pid is the node's own, not a wrapper's
        node.wait()
        assert get(url, timeout=0.5)[0] == 0
    finally:
        testbed.stop()


def test_stop_leaves_no_namespace_veth_bridge_or_process() -> None:
    testbed = NetnsTestbed(free_ports(3)).start()
    try:
        start_plain_nodes(testbed)
        seen = footprint(testbed)
        namespaces = PinnedNamespaces(seen["holders"])
        assert leftovers(seen, namespaces) != [] and uplink_left(seen)
    finally:
        testbed.stop()
    with namespaces:
        assert leftovers(seen, namespaces) == []
    assert not uplink_left(seen)  # stop removes it at once


HARNESS = """
import json, sys, time
from chaos.test_netns import footprint, start_plain_nodes
from dht.testbed.netns import NetnsTestbed
testbed = NetnsTestbed(json.loads(sys.argv[1])).start()
start_plain_nodes(testbed)
print(json.dumps(footprint(testbed)), flush=True)
time.sleep(60)
"""


def test_a_harness_killed_with_sigkill_leaves_nothing_behind() -> None:
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS, json.dumps(free_ports(3))],
        stdout=subprocess.PIPE,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    namespaces = PinnedNamespaces(())
    try:
        assert harness.stdout is not None
        seen = json.loads(harness.stdout.readline())
        namespaces = PinnedNamespaces(seen["holders"])
        assert leftovers(seen, namespaces) != [] and uplink_left(seen)
    finally:
        harness.kill()
        harness.wait()
    with namespaces:
        wait_for(lambda: leftovers(seen, namespaces), lambda left: left == [])
    wait_for(lambda: uplink_left(seen), lambda left: not left)
