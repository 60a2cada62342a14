"""One simulated run from one seed: the cluster, the clients, the faults, the quiet
period after them, the final state read off every replica, and the verdict of
`dht.history`'s checker. Everything random comes from the seed, everything timed from
the virtual loop: the same seed on the same commit gives the same trace hash."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dht.history.checker import CLOCK_SLACK, check
from dht.history.classification import classify
from dht.history.operation import Op
from dht.model.merkle import holders
from dht.model.record import Record, newest
from dht.simulation.defects import put_back
from dht.simulation.faults import KINDS, MEMBERSHIP_KINDS, Nemesis
from dht.simulation.loop import VirtualClocks, VirtualLoop
from dht.simulation.network import Network, Trace
from dht.simulation.quorums import Overlap, Replicas
from dht.simulation.sim_node import SimNode, node_config
from dht.simulation.workload import Client

log = logging.getLogger(__name__)

# Mixed into a client's seed for the stream its `replicas` are drawn from.
REPLICAS_STREAM = 0x9E37_79B9_7F4A_7C15  # the golden ratio's bits, as splitmix64 uses

# After the faults: how long the cluster runs with no fault and no client, for hints and
# anti-entropy (every `anti_entropy_interval`) to bring every replica together.
SETTLE = 30.0


@dataclass(frozen=True)
class Settings:
    seed: int
    seconds: float = 60.0
    nodes: int = 3
    clients: int = 3
    keys: int = 10
    think: float = 0.2  # mean seconds between a client's requests
    faults: bool = True
    fault_kinds: tuple[str, ...] = KINDS
    narrow_deletes: bool = False  # one DELETE in two at replicas=2/2
    write_once: bool = False  # keys written once, left idle, deleted and read again
    mixed_replicas: bool = True  # each request's replicas=A/F drawn, or the default
    defect: str | None = None  # a known defect put back (`dht.simulation.defects`)

    @property
    def spares(self) -> int:
        """Nodes not started with the others: one, for a grow to add."""
        return 1 if self.faults and "grow" in self.fault_kinds else 0


@dataclass
class Result:
    settings: Settings
    simulated: float
    wall: float
    operations: int
    ok: bool
    verdict: str
    trace_hash: str
    faults: list[str] = field(default_factory=list)
    details: str = ""
    history: list[Op] = field(default_factory=list)  # what the clients did, as judged

    @property
    def speed(self) -> float:
        return self.simulated / self.wall if self.wall else float("inf")


def simulate(settings: Settings) -> Result:
    """Runs one seed to its verdict, on a loop of its own."""
    loop = VirtualLoop()
    problems: list[str] = []

    def on_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = context.get("message", "")
        if "was destroyed but it is pending" in message:
            return  # a crashed incarnation's tasks, never to run again
        problems.append(f"{message}: {context.get('exception')!r}")

    loop.set_exception_handler(on_exception)
    with (
        tempfile.TemporaryDirectory(prefix="dht-simulation-") as folder,
        _quiet_loggers(),
        put_back(settings.defect),
    ):
        started = time.perf_counter()
        try:
            result = loop.run_until_complete(_main(loop, settings, Path(folder), problems))
        finally:
            _close(loop)
        result.wall = time.perf_counter() - started
    return result


def _close(loop: VirtualLoop) -> None:
    asyncio.set_event_loop(None)
    loop.forget_the_dead()
    loop.close()


@contextlib.contextmanager
def _quiet_loggers() -> Iterator[None]:
    """The nodes' warnings (circuits opening, channels closing) are what faults cause:
    kept out of the output unless asked for (`--log`)."""
    dht_log = logging.getLogger("dht")
    if dht_log.level != logging.NOTSET:
        yield
        return
    dht_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        dht_log.setLevel(logging.NOTSET)


async def _main(loop: VirtualLoop, settings: Settings, folder: Path, problems: list[str]) -> Result:
    rng = random.Random(settings.seed)
    trace = Trace()
    network = Network(loop, random.Random(rng.getrandbits(64)), trace)
    loop.network = network
    # The network routes by port: each node has its own.
    everyone = tuple(
        f"http://10.0.0.{i + 1}:{7001 + i}" for i in range(settings.nodes + settings.spares)
    )
    urls = everyone[: settings.nodes]
    clocks = VirtualClocks(loop, settings.seed)
    started = [
        SimNode(
            f"node{i + 1}",
            node_config(url, urls, folder / f"node{i + 1}"),
            network,
            loop,
            random.Random(rng.getrandbits(64)),
            clocks,
        )
        for i, url in enumerate(everyone)
    ]
    nodes, spares = started[: settings.nodes], started[settings.nodes :]
    for node in nodes:
        node.start()
    history: list[Op] = []
    changes = settings.faults and any(kind in MEMBERSHIP_KINDS for kind in settings.fault_kinds)
    clients = []
    for i in range(settings.clients):
        bits = rng.getrandbits(64)
        replicas = Replicas(random.Random(bits ^ REPLICAS_STREAM), majorities_only=changes)
        clients.append(
            Client(
                i + 1,
                nodes,
                network,
                random.Random(bits),
                settings.keys,
                settings.think,
                history,
                trace,
                settings.narrow_deletes,
                settings.write_once,
                replicas if settings.mixed_replicas else None,
            )
        )
    until = loop.time() + settings.seconds
    nemesis: Nemesis | None = None
    if settings.faults:
        nemesis_rng = random.Random(rng.getrandbits(64))
        nemesis = Nemesis(nodes, network, loop, nemesis_rng, trace, settings.fault_kinds, spares)
        faults = loop.create_task(nemesis.run(until))
    await asyncio.gather(*(client.run(until) for client in clients))
    if nemesis is not None:
        await faults
        await nemesis.heal_all()
    await asyncio.sleep(SETTLE)
    members = nemesis.members if nemesis is not None else nodes
    final, diverged = _final_state(members, history)
    final_at = (loop.time(), loop.time())
    slack = CLOCK_SLACK + _version_spread(started)
    for node in started:
        node.crash()  # nothing runs past the verdict
        problems.extend(node.violations)
    sizes = nemesis.sizes if nemesis is not None else {settings.nodes}
    report = check(history, final, slack, final_at, Overlap(sizes))
    classification = classify(history, final, slack, final_at, report)
    ok = report.ok and not diverged and not problems
    verdict_parts = [classification.line()]
    if diverged:
        verdict_parts.append(f"{len(diverged)} keys diverged: {', '.join(diverged[:5])}")
    if problems:
        verdict_parts.append(f"{len(problems)} broken invariants or unhandled errors")
    details = "" if report.ok else report.details()
    if problems:
        details += "\n" + "\n".join(problems[:5])
    trace.add("final", sorted(final.items()))
    return Result(
        settings,
        loop.time(),
        0.0,
        len(history),
        ok,
        ("PASS " if ok else "FAIL ") + "; ".join(verdict_parts),
        trace.hexdigest(),
        nemesis.log if nemesis is not None else [],
        details,
        history,
    )


def _version_spread(nodes: list[SimNode]) -> float:
    """How far apart, in seconds, two versions issued at the same moment could be, from
    what every node issued in the run: the checker's allowance for writes that a clock
    off orders otherwise than real time (SPEC 9.13). Measured on the versions, not the
    clocks: a node fenced for its clock issues none, so a clock minutes off that
    coordinates nothing costs the checker nothing, and a restart's ceiling (SPEC 8.7),
    which runs versions ahead of a true clock, counts as it is."""
    errors = [node.version_error for node in nodes if node.version_error is not None]
    if not errors:
        return 0.0
    return max(most for _, most in errors) - min(least for least, _ in errors)


def _final_state(
    nodes: list[SimNode], history: list[Op]
) -> tuple[dict[str, bytes | None], list[str]]:
    """Each written key's converged state, read off the storage of every member that is
    to hold it, and the keys whose replicas differ. Its holders are those of the newest
    copy any member has, under the final membership: a record keeps the `F` it was
    written with (the cluster's size then, by default), so after a grow some keys live
    on fewer nodes than the cluster has."""
    final: dict[str, bytes | None] = {}
    diverged: list[str] = []
    ring = nodes[0].membership.topology.current
    by_url = {node.config.self_url: node for node in nodes}
    for key in sorted({op.key for op in history}):
        encoded = key.encode()
        best = newest([node.storage.get(encoded) for node in nodes])
        owners = [by_url[url] for url in holders(ring, encoded, best.copies if best else 0)]
        records: list[Record | None] = [node.storage.get(encoded) for node in owners]
        states = {_state(record, nodes[0]) for record in records}
        if len(states) > 1:
            diverged.append(key)
        final[key] = _state(records[0], nodes[0])
    return final, diverged


def _state(record: Record | None, node: SimNode) -> bytes | None:
    if record is None or not record.live_at(node.clock.wall_ms()):
        return None
    return record.value


def shrink(failing: Settings) -> Settings:
    """A shorter failing run than `failing` (a failing seed's): the fewest seconds of
    load, in steps of 5, then the fewest kinds of fault, each left out in turn while the
    run still fails. The same seed with less load or fewer kinds draws another schedule,
    so each candidate is run, never assumed; what is returned failed."""
    best = failing
    low, high = 0, int(best.seconds // 5)  # in steps of 5 s: `high` fails
    while high - low > 1:
        middle = (low + high) // 2
        candidate = dataclasses.replace(best, seconds=middle * 5.0)
        if simulate(candidate).ok:
            low = middle
        else:
            high = middle
    if high * 5.0 < best.seconds:
        best = dataclasses.replace(best, seconds=high * 5.0)
    for kind in best.fault_kinds:
        kinds = tuple(k for k in best.fault_kinds if k != kind)
        if kinds and not simulate(dataclasses.replace(best, fault_kinds=kinds)).ok:
            best = dataclasses.replace(best, fault_kinds=kinds)
    return best
