"""Follows PUTs through dht's own code and counts the module hops: the calls from a
function of one module to a function of another. The count is the cost of reading how a
write travels (ARCHITECTURE.md walks the same path); it is a measure of structure,
not of speed.

    .venv/bin/python -m bench.put_walk            # 3 nodes, PUT at the default 2/3

Runs in the simulator (`dht.simulation`): three nodes of dht's own code on virtual time,
one process, so every Python call of every node is seen. A PUT enters through the HTTP
edge (`dht.web`, since the simulator runs it); the first figure leaves the edge's hops
out, as the counts in ARCHITECTURE.md do (made before it ran there: a PUT entered at
`Coordinator.put`, as `ClientApi` calls it), and the second counts them. The background
loops are slowed to once in ten minutes so that only the PUT's own calls are counted.
A warm-up PUT dials the channels first; each counted PUT runs until its answer and
its slowest replica's acknowledgement are in.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import random
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from dht.simulation.loop import VirtualLoop
from dht.simulation.network import Network, Trace
from dht.simulation.sim_node import SimNode, node_config

_EDGE = "dht.web."
QUIET = 600.0  # seconds between two rounds of every background loop
PUTS = 5


def _module(frame: FrameType | None) -> str | None:
    """The dht module of a frame, or None for the simulator's own code and the rest."""
    if frame is None:
        return None
    name = frame.f_globals.get("__name__", "")
    if not name.startswith("dht.") or name.startswith("dht.simulation"):
        return None
    return str(name)


class Walk:
    """Every call between two of dht's modules while it records."""

    def __init__(self) -> None:
        self.hops: Counter[tuple[str, str]] = Counter()
        self.modules: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = _module(frame)
        if callee is None:
            return
        self.modules.add(callee)
        caller = _module(frame.f_back)
        if caller is not None and caller != callee:
            self.hops[(caller, callee)] += 1

    @property
    def count(self) -> int:
        """Hops from the coordinator on: none to or from the HTTP edge (`dht.web`)."""
        return sum(n for pair, n in self.hops.items() if not any(_EDGE in m for m in pair))

    @property
    def count_with_edge(self) -> int:
        return sum(self.hops.values())

    @property
    def two_way(self) -> list[tuple[str, str]]:
        """Pairs of modules that call each other: one calls back into the other."""
        return sorted((a, b) for a, b in self.hops if a < b and (b, a) in self.hops)

    @property
    def packages(self) -> set[str]:
        return {module.split(".")[1] for module in self.modules}


def _node(
    name: str,
    url: str,
    urls: tuple[str, ...],
    folder: Path,
    network: Network,
    loop: VirtualLoop,
    rng: random.Random,
) -> SimNode:
    config = dataclasses.replace(
        node_config(url, urls, folder / name),
        hint_interval=QUIET,
        anti_entropy_interval=QUIET,
    )
    extra: list[Any] = []
    if "clocks" in inspect.signature(SimNode).parameters:  # since dht.model.machine
        from dht.simulation.loop import VirtualClocks

        extra.append(VirtualClocks(loop, 1))
    return SimNode(name, config, network, loop, random.Random(rng.getrandbits(64)), *extra)


async def _walks(loop: VirtualLoop, folder: Path, puts: int) -> list[Walk]:
    rng = random.Random(1)
    network = Network(loop, random.Random(rng.getrandbits(64)), Trace())
    loop.network = network
    urls = tuple(f"http://10.0.0.{i + 1}:{7001 + i}" for i in range(3))
    nodes = [
        _node(f"node{i + 1}", url, urls, folder, network, loop, rng) for i, url in enumerate(urls)
    ]
    for node in nodes:
        node.start()
    await asyncio.sleep(5)  # started, fence's first look done
    port = nodes[0].config.port

    async def put(key: bytes) -> int:
        if not hasattr(SimNode, "serve"):  # the HTTP edge runs in the simulator
            from dht.simulation.http_client import http_request

            status, _ = await http_request(network, "client", port, "PUT", key, b"value", None)
            return status

        async def serve(node: SimNode) -> tuple[int, bytes | None]:  # before it did
            return await node.serve("PUT", key, b"value")  # type: ignore[attr-defined]

        status, _ = await network.request("client", port, serve)
        return int(status)

    assert await put(b"warm-up") == 201
    await asyncio.sleep(1)
    walks = []
    for n in range(puts):
        walk = Walk()
        sys.setprofile(walk)
        try:
            status = await put(f"walk-{n}".encode())
            await asyncio.sleep(0.5)  # the third replica's answer comes in too
        finally:
            sys.setprofile(None)
        assert status == 201, status
        walks.append(walk)
    for node in nodes:
        node.crash()
    return walks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=PUTS, help="PUTs to count")
    parser.add_argument("--show", action="store_true", help="list every hop of the last PUT")
    args = parser.parse_args()
    loop = VirtualLoop()
    asyncio.set_event_loop(loop)
    with tempfile.TemporaryDirectory(prefix="dht-put-walk-") as folder:
        walks = loop.run_until_complete(_walks(loop, Path(folder), args.puts))
    last = walks[-1]
    counts = [walk.count for walk in walks]
    with_edge = [walk.count_with_edge for walk in walks]
    print(
        f"one PUT at 2/3 on 3 nodes: {statistics.median(counts):.0f} module hops from the "
        f"coordinator on (median of {len(counts)}: {counts}); "
        f"{statistics.median(with_edge):.0f} with the HTTP edge's; "
        f"{len(last.hops)} distinct, through "
        f"{len(last.modules)} modules in {len(last.packages)} packages "
        f"({', '.join(sorted(last.packages))}); modules calling each other both ways: "
        + (", ".join(f"{a} <-> {b}" for a, b in last.two_way) or "none")
    )
    if args.show:
        for (caller, callee), times in sorted(last.hops.items()):
            print(f"  {times:4d}  {caller} -> {callee}")


if __name__ == "__main__":
    main()
