"""Benchmark: anti-entropy and tombstone collection (SPEC rules 9.9 and 9.10).

Four figures on 127.0.0.1. A 3-node cluster (`tests/launcher.py`, `--log-level WARNING`,
hints off with `--hint-max-bytes 0`, `--anti-entropy-interval` 1 s) is loaded with
`--keys` keys (`key0000000000 ..`, 100 random bytes each, so compression does not hide
the data) by concurrent PUTs (aiohttp, 64 in flight) at the default replicas (2/3; every
node holds every key). In the order they run:

1. foreground: the cluster's highest rate of a mixed GET/PUT workload (wrk, closed model,
   5 s), then half of it at a constant rate (vegeta, open model) into node 1 for
   `--window` seconds with no exchange running (in sync), then again while a wiped node 3
   is rebuilt at `--rate` (the default `--anti-entropy-rate`); percentiles, the p99
   change (target: up by less than 20%), and the rebuild's copy rate with and without
   the traffic. Each window also counts the LevelDB compactions that began in it (from
   the nodes' LevelDB LOG): at this write rate all three replicas flush and compact at
   once about every 25 s, stalling requests for up to ~0.7 s on 2 cores, anti-entropy
   or not; a 30 s window holds at least one. The machine is shared: each window first
   waits (up to `--patience`) for a second in which other processes use under a
   quarter core, prints the CPU they used during it, and is measured once more if that
   was more.
2. rebuild: nodes 1 and 2 restart at `--fast-rate` records/s (so the rate cap is not the
   figure); node 3 starts on an empty data folder; the time until every record was copied
   into it. Progress is read from `/v0/status`: the records node 3 pulled plus those its
   peers pushed to it (each copy is counted once, by the side that started the exchange);
   node 3's records are compared with a peer's once at the end.
3. divergence: stop node 3, overwrite `--divergence` of the keys through node 1 (hints
   off: node 3 misses them), restart it, and count the records every node sent and
   received until every pair has exchanged without a difference, and the leaves the
   exchanges compared and found differing (next to the count expected for random keys).
4. tombstones: on a node of its own (`--tombstone-nodes 3`: on the cluster), loaded the
   same way, `--tombstone-grace 1`: delete every key, then the LevelDB folder's size
   (`du -sb`) after the deletes, once every tombstone is gone (`/v0/status`
   `tombstones.collected` reaches the key count, then no record is left), with the node
   stopped, and after an explicit `CompactRange` over every key (the node compacts by
   itself after a collection pass that removed 10,000 records or more).

Prints each figure as it comes, then a Markdown block for a note. Needs wrk and vegeta
(`make bench-tools`); without vegeta the foreground traffic comes from the Python
generator of bench/constant_rate.py, capped at 2,500 requests/s. Run from the repo root
(the default run takes about 5 minutes on 2 cores; `--quick`, 10,000 keys and 5 s
windows, about 1):

    .venv/bin/python -m bench.anti_entropy [--keys 100000] [--quick] [--only rebuild]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dht.config import NodeConfig
from dht.model.merkle import LEAVES
from locustfiles.prefill import entity_path, key_name

Status = dict[str, Any]  # a node's /v0/status
Statuses = dict[str, Status]  # by node URL
Pair = tuple[str, str]  # (node, peer): the exchanges `node` started with `peer`

SCENARIOS = ("foreground", "rebuild", "divergence", "tombstones")  # in the order they run
DEFAULT_KEYS = 100_000
QUICK_KEYS = 10_000
VALUE = b"v" * 100  # the foreground PUTs' value
VALUE_BYTES = len(VALUE)
CONCURRENCY = 64
INTERVAL = 1.0
FAST_RATE = 20_000.0
DEFAULT_RATE = NodeConfig.anti_entropy_rate
DEFAULT_GRACE = NodeConfig.tombstone_grace
PYTHON_GENERATOR_CAP = 2_500.0
P99_TARGET = 0.20  # the foreground p99 may rise by less than this share
POLL = 0.1
# A foreground window: each replica flushes its memtable and compacts about every 25 s at
# the foreground's write rate (all three at once: they take the same writes), which
# stalls requests for up to ~0.7 s on 2 cores. A shorter window holds one such stall or
# none, and its p99 says more about that than about anti-entropy.
WINDOW = 30.0
SAMPLE = 0.5
MAX_RATE_SECONDS = 5.0
REQUEST_TIMEOUT = 2.0
QUIET_SAMPLE = 5.0  # seconds the rebuild's copy rate is read with no traffic
QUIET_CORES = 0.25  # other processes' CPU under which the machine counts as quiet
QUIET_LOG = "no --secret"  # the one warning every node logs at start, by design
# Warnings expected here: a peer's circuit opens while node 3 is stopped on purpose.
EXPECTED_LOG = ("circuit to",)


# -- reading /v0/status (pure) ----------------------------------------------------------


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


def relative_change(before: float, after: float) -> float:
    return (after - before) / before if before else float("inf")


def mixed_lua(keys: int, value_bytes: int, seed: int = 1) -> str:
    """A wrk script: GET and PUT (an overwrite) alternately, each of a key drawn uniformly
    from the loaded `key0000000000 ..` key space (locustfiles.prefill.key_name)."""
    return f"""-- generated by bench/anti_entropy.py: mixed GET/PUT over {keys} loaded keys
math.randomseed({seed})
local value = string.rep("v", {value_bytes})
local n = 0
function request()
  n = n + 1
  local path = string.format("/v0/entity?id=key%010d", math.random(0, {keys - 1}))
  if n % 2 == 0 then return wrk.format("PUT", path, nil, value) end
  return wrk.format("GET", path)
end
"""


def mixed_targets(url: str, keys: int, count: int, value: bytes, seed: int = 0) -> Iterator[str]:
    """`count` vegeta JSON target lines: GET and PUT (overwrite) alternately, each of a
    key uniform over the loaded key space."""
    draw = random.Random(seed).randrange
    body = base64.b64encode(value).decode()
    for index in range(count):
        path = entity_path(key_name(draw(keys)))
        if index % 2:
            yield f'{{"method":"PUT","url":"{url}{path}","body":"{body}"}}\n'
        else:
            yield f'{{"method":"GET","url":"{url}{path}"}}\n'


def log_problems(lines: Iterable[str]) -> list[str]:
    """The lines of a node's log that report something wrong: warnings, errors and
    tracebacks, but the no-secret warning every node gives at start."""
    markers = ("WARNING", "ERROR", "CRITICAL", "Traceback")
    return [
        line.rstrip()
        for line in lines
        if any(marker in line for marker in markers) and QUIET_LOG not in line
    ]


def size(count: float) -> str:
    """Bytes as MiB with the exact count: `12.3 MiB (12,902,400 B)`."""
    return f"{count / 2**20:,.1f} MiB ({count:,.0f} B)"


def seconds(value: float) -> str:
    return f"{value:.1f} s"


# -- results (pure) ---------------------------------------------------------------------


@dataclass
class Rebuild:
    keys: int
    ready_s: float  # restart to /v0/status answering
    converged_s: float  # restart to every record copied
    first_copy_s: float  # restart to the first record copied
    pulled: int
    pushed: dict[str, int]  # by peer
    verified: bool
    rate: float

    @property
    def copy_rate(self) -> float:
        span = self.converged_s - self.first_copy_s
        return self.keys / span if span > 0 else float("inf")

    @property
    def streams(self) -> int:
        """Exchanges that copied something into the wiped node: its own with each peer
        (counted together as one stream: it runs them one after the other) and each
        peer's with it."""
        return (1 if self.pulled else 0) + sum(1 for n in self.pushed.values() if n)

    def lines(self) -> list[str]:
        pushed = ", ".join(f"{n:,}" for n in self.pushed.values())
        one_stream = self.keys / DEFAULT_RATE
        return [
            f"rebuild of a wiped replica ({self.keys:,} keys, --anti-entropy-rate "
            f"{self.rate:,.0f}): ready {seconds(self.ready_s)} after the restart, first "
            f"record copied at {seconds(self.first_copy_s)}, every record at "
            f"{seconds(self.converged_s)} ({self.copy_rate:,.0f} records/s from the first "
            f"copy); it pulled {self.pulled:,}, its peers pushed {pushed}; full record set "
            f"equal to a peer's: {'yes' if self.verified else 'NO'}",
            f"  at the default --anti-entropy-rate {DEFAULT_RATE:,.0f} (records/s per "
            f"exchange): >= {seconds(one_stream)} through one exchange, >= "
            f"{seconds(one_stream / max(1, self.streams))} with the {self.streams} exchanges "
            f"that copied here running side by side (each also waits 1/rate s per key, on "
            f"top of the copy itself; the foreground figure measures it)",
        ]


@dataclass
class Divergence:
    keys: int
    changed: int
    converged_s: float
    sent: int
    received: int
    leaves: dict[Pair, tuple[int, int]]  # exchanges that found leaves differing
    verified: bool
    names: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        total = self.sent + self.received
        exchanges = (
            "; ".join(
                f"{self.names.get(node, node)} with {self.names.get(peer, peer)}: "
                f"{compared:,} compared, {differing:,} differing"
                for (node, peer), (compared, differing) in sorted(self.leaves.items())
            )
            or "none seen"
        )
        return [
            f"{self.changed:,} keys changed ({self.changed / self.keys:.1%} of {self.keys:,}) "
            f"while a replica was down: in sync {seconds(self.converged_s)} after its "
            f"restart; records exchanged on all nodes: {self.sent:,} sent + {self.received:,} "
            f"received = {total:,} ({total / self.changed:.2f} per changed key, "
            f"{total / self.keys:.2%} of the keys); every node's records equal: "
            f"{'yes' if self.verified else 'NO'}",
            f"  leaves (of {LEAVES:,}) in the exchanges that found differences: {exchanges}; "
            f"{expected_differing_leaves(self.changed):,.0f} expected to hold a changed key",
        ]


@dataclass(frozen=True)
class Foreground:
    """One constant-rate window: latencies, what the generator did, and the CPU the
    machine's other processes took meanwhile (`foreign_cores`: the machine's busy time
    less the nodes', the generator's and this process's, over the window)."""

    rate: float
    p50_ms: float
    p99_ms: float
    requests: int
    failures: int
    sent_rate: float
    generator_cores: float
    foreign_cores: float = 0.0
    p90_ms: float = 0.0
    p95_ms: float = 0.0
    max_ms: float = 0.0
    compactions: tuple[int, ...] = ()  # LevelDB compactions begun in the window, per node


@dataclass
class ForegroundFigure:
    generator: str
    max_rate: float
    max_rate_how: str
    idle: Foreground  # in sync: exchanges find nothing to copy
    busy: Foreground  # while a wiped node 3 is rebuilt
    copied_in_window: int
    window_s: float
    running_at_end: bool
    rate: float  # --anti-entropy-rate of the rebuild
    quiet_copy_rate: float  # records/s the rebuild copied right after, with no traffic
    keys: int
    attempts: tuple[int, int] = (1, 1)  # windows measured for idle, busy (see retries)

    @property
    def p99_change(self) -> float:
        return relative_change(self.idle.p99_ms, self.busy.p99_ms)

    @property
    def windows(self) -> list[Foreground]:
        return [self.idle, self.busy]

    def lines(self) -> list[str]:
        change = self.p99_change
        verdict = "met" if change < P99_TARGET else "missed"
        windows = [("no exchange running", self.idle), ("rebuild running", self.busy)]
        in_window = self.copied_in_window / self.window_s
        return [
            f"foreground at {self.idle.rate:,.0f} req/s (half of {self.max_rate:,.0f}, "
            f"{self.max_rate_how}), mixed GET/PUT into node 1, {self.window_s:g} s per window:",
            *(
                f"  {name:20} p50 {w.p50_ms:7.2f}  p90 {w.p90_ms:7.2f}  p95 {w.p95_ms:7.2f}  "
                f"p99 {w.p99_ms:7.2f}  max {w.max_ms:7.2f} ms; {w.requests:,} requests, "
                f"{w.failures} failed, sent {w.sent_rate:,.0f}/s; generator "
                f"{w.generator_cores:.2f} cores, other processes {w.foreign_cores:.2f} cores; "
                f"LevelDB compactions begun per node {'/'.join(map(str, w.compactions))}"
                for name, w in windows
            ),
            f"  p99 change {change:+.1%} (target < +{P99_TARGET:.0%}): {verdict}; p50 change "
            f"{relative_change(self.idle.p50_ms, self.busy.p50_ms):+.1%}"
            + (
                f" (windows measured: {self.attempts[0]} idle, {self.attempts[1]} busy; the one "
                "with the least CPU taken by other processes is shown)"
                if self.attempts != (1, 1)
                else ""
            ),
            f"  the rebuild (--anti-entropy-rate {self.rate:,.0f}) copied "
            f"{self.copied_in_window:,} records during the window ({in_window:,.0f}/s) and was "
            f"{'still running at its end' if self.running_at_end else 'DONE BEFORE ITS END'}; "
            f"right after it, without traffic, {self.quiet_copy_rate:,.0f} records/s: "
            f"{self.keys:,} keys would take ~{seconds(self.keys / max(self.quiet_copy_rate, 1))} "
            "to rebuild at this rate",
            f"  load generator: {self.generator}",
        ]


@dataclass
class Tombstones:
    keys: int
    nodes: int
    before_deletes: list[int]
    after_deletes: list[int]
    after_collection: list[int]
    after_stop: list[int]
    after_compaction: list[int]
    collected: list[int]
    left: list[int]  # records (tombstones included) each node still holds
    collect_s: float | None  # from the last delete to collected >= keys everywhere
    gone_s: float | None  # from the last delete to no record (tombstone) left anywhere
    churn: int  # records anti-entropy copied meanwhile (tombstones copied back)
    delete_s: float
    deadline: float

    def lines(self) -> list[str]:
        def total(sizes: list[int]) -> str:
            per_node = " / ".join(f"{s / 2**20:.1f}" for s in sizes)
            return size(sum(sizes)) + (f", per node {per_node}" if len(sizes) > 1 else "")

        def when(value: float | None) -> str:
            return seconds(value) if value is not None else f"NOT within {self.deadline:g} s"

        return [
            f"tombstones of {self.keys:,} deleted keys on {self.nodes} node"
            f"{'s' if self.nodes > 1 else ''} (--tombstone-grace 1, the deletes took "
            f"{seconds(self.delete_s)}): status collected "
            f"{' / '.join(f'{c:,}' for c in self.collected)} (>= {self.keys:,} everywhere: "
            f"{when(self.collect_s)} after the last delete); every record gone: "
            f"{when(self.gone_s)} after it (records left, tombstones included: "
            f"{' / '.join(f'{n:,}' for n in self.left)}); records anti-entropy copied "
            f"meanwhile: {self.churn:,}",
            f"  LevelDB folder{'s' if self.nodes > 1 else ''} (du -sb):",
            f"  before the deletes {total(self.before_deletes)}",
            f"  after the deletes {total(self.after_deletes)}",
            f"  once collected (running) {total(self.after_collection)}",
            f"  stopped {total(self.after_stop)}",
            f"  after CompactRange {total(self.after_compaction)}",
        ]


def markdown(
    keys: int,
    rebuild: Rebuild | None,
    divergence: Divergence | None,
    foreground: ForegroundFigure | None,
    tombstones: Tombstones | None,
) -> str:
    rows = ["| figure | result |", "| --- | --- |"]
    if rebuild:
        rows.append(
            f"| rebuild a wiped replica, {keys:,} keys (rate cap {rebuild.rate:,.0f}/s) | "
            f"{seconds(rebuild.converged_s)} after restart ({rebuild.copy_rate:,.0f} records/s); "
            f"verified {'yes' if rebuild.verified else 'NO'}; at the default "
            f"{DEFAULT_RATE:,.0f}/s per exchange >= {seconds(keys / DEFAULT_RATE)} "
            f"(one exchange) |"
        )
    if divergence:
        total = divergence.sent + divergence.received
        differing = max((d for _, d in divergence.leaves.values()), default=0)
        compared = max((c for c, _ in divergence.leaves.values()), default=0)
        rows.append(
            f"| records exchanged, {divergence.changed:,} keys changed "
            f"({divergence.changed / keys:.0%}) | {total:,} ({total / keys:.2%} of the keys); "
            f"leaves up to {compared:,} compared, {differing:,} differing of {LEAVES:,}; "
            f"in sync {seconds(divergence.converged_s)} after restart |"
        )
    if foreground:
        f, idle, busy = foreground, foreground.idle, foreground.busy
        rows.append(
            f"| foreground p50 / p95 / p99 at {busy.rate:,.0f} req/s (vegeta, "
            f"{f.window_s:g} s each), no exchange -> rebuild running | {idle.p50_ms:.2f} / "
            f"{idle.p95_ms:.2f} / {idle.p99_ms:.2f} ms -> {busy.p50_ms:.2f} / "
            f"{busy.p95_ms:.2f} / {busy.p99_ms:.2f} ms (p99 {f.p99_change:+.0%}, target < "
            f"+{P99_TARGET:.0%}); LevelDB compactions in the windows "
            f"{sum(idle.compactions)} -> {sum(busy.compactions)}; other processes used "
            f"{max(w.foreign_cores for w in f.windows):.2f} cores at most |"
        )
        rows.append(
            f"| rebuild at the default rate ({f.rate:,.0f}/s per exchange) | "
            f"{f.copied_in_window / f.window_s:,.0f} records/s under the foreground traffic, "
            f"{f.quiet_copy_rate:,.0f}/s without: ~{seconds(keys / max(f.quiet_copy_rate, 1))} "
            f"for {keys:,} keys |"
        )
    if tombstones:
        t = tombstones
        gone = seconds(t.gone_s) if t.gone_s is not None else f"NOT within {t.deadline:g} s"
        rows.append(
            f"| LevelDB size, {keys:,} keys deleted ({t.nodes} node{'s' if t.nodes > 1 else ''}"
            f"{', total' if t.nodes > 1 else ''}) | before the deletes "
            f"{sum(t.before_deletes) / 2**20:.1f} MiB; after them "
            f"{sum(t.after_deletes) / 2**20:.1f} MiB; every tombstone collected: {gone} after "
            f"the last delete; then {sum(t.after_collection) / 2**20:.1f} MiB; after CompactRange "
            f"{sum(t.after_compaction) / 2**20:.1f} MiB |"
        )
    return "\n".join(rows)


# -- the cluster ------------------------------------------------------------------------


def node_flags(rate: float, grace: float = DEFAULT_GRACE) -> list[str]:
    return [
        "--log-level",
        "WARNING",
        "--hint-max-bytes",
        "0",
        "--anti-entropy-interval",
        f"{INTERVAL:g}",
        "--anti-entropy-rate",
        f"{rate:g}",
        "--tombstone-grace",
        f"{grace:g}",
    ]


def status(node: Any) -> Status:
    from tests.launcher import request

    answer = request("GET", node.url + "/v0/status", timeout=5)
    if answer.status != 200:
        raise RuntimeError(f"{node.url}/v0/status: {answer.status} {answer.text}")
    result: Status = json.loads(answer.body)
    return result


def statuses(cluster: Any) -> Statuses:
    return {node.cluster_url: status(node) for node in cluster}


def wait(
    probe: Callable[[], Statuses], done: Callable[[Statuses], bool], what: str, deadline: float
) -> Statuses:
    started = time.monotonic()
    while True:
        now = probe()
        if done(now):
            return now
        if time.monotonic() - started > deadline:
            raise TimeoutError(f"{what}: not within {deadline:g} s")
        time.sleep(POLL)


def wait_in_sync(cluster: Any, deadline: float) -> Statuses:
    """Until every node's trees are loaded and every pair has exchanged, finding nothing
    to copy, since now."""
    before = wait(
        lambda: statuses(cluster),
        lambda s: all(n["anti_entropy"]["trees_ready"] for n in s.values()),
        "trees loaded",
        deadline,
    )
    return wait(lambda: statuses(cluster), lambda s: in_sync(before, s), "in sync", deadline)


def restart_all(cluster: Any, flags: list[str]) -> None:
    cluster.stop()
    for node in cluster:
        node.extra_args = list(flags)
    cluster.start()


def wipe_and_restart(node: Any) -> float:
    """Stops `node`, deletes its data folder, starts it; returns when it started (the
    monotonic clock just before the start) after it answers."""
    node.stop()
    shutil.rmtree(node.data_dir)
    started = time.monotonic()
    node.start()
    return started


def compaction_starts(log: Iterable[str]) -> list[datetime.datetime]:
    """When LevelDB began each compaction, from its LOG file: lines
    `2026/11/23-13:36:53.057... Compacting 1@1 + 7@2 files` (its local time)."""
    starts = []
    for line in log:
        if " Compacting " in line:
            with contextlib.suppress(ValueError):
                starts.append(datetime.datetime.strptime(line[:26], "%Y/%m/%d-%H:%M:%S.%f"))
    return starts


def compactions_between(node: Any, began: datetime.datetime, ended: datetime.datetime) -> int:
    log = node.data_dir / "leveldb" / "LOG"
    if not log.exists():
        return 0
    lines = log.read_text(errors="replace").splitlines()
    return sum(began <= start <= ended for start in compaction_starts(lines))


def leveldb_bytes(node: Any) -> int:
    """`du -sb` of the node's LevelDB folder: its files' sizes."""
    total = 0
    for folder, _, files in os.walk(node.data_dir / "leveldb"):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += (Path(folder) / name).stat().st_size
    return total


def compact(node: Any) -> None:
    """LevelDB's CompactRange over every key of a stopped node. Bounds are given: plyvel
    1.5's `compact_range()` without them passes empty keys, not "unbounded", and compacts
    nothing. Every stored key starts with a one-byte prefix below 0xff (dht.storage.store)."""
    import plyvel

    db = plyvel.DB(str(node.data_dir / "leveldb"))
    try:
        db.compact_range(start=b"", stop=b"\xff" * 8)
    finally:
        db.close()


async def send_all(
    url: str, requests: Iterable[tuple[str, str, bytes | None]], concurrency: int = CONCURRENCY
) -> Counter[int]:
    """Sends every (method, path, body) with `concurrency` in flight on kept-alive
    connections, retrying a 503/504 or a dropped connection twice; returns the final
    answers by status (0: no answer)."""
    import aiohttp

    answers: Counter[int] = Counter()
    pending = iter(requests)
    timeout = aiohttp.ClientTimeout(total=10)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            for method, path, body in pending:
                code = 0
                for attempt in range(3):
                    try:
                        async with session.request(method, path, data=body) as response:
                            await response.read()
                            code = response.status
                    except (aiohttp.ClientError, TimeoutError):
                        code = 0
                    if code not in (0, 503, 504):
                        break
                    await asyncio.sleep(0.05 * (attempt + 1))
                answers[code] += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return answers


def send(url: str, requests: Iterable[tuple[str, str, bytes | None]], expect: int) -> float:
    """Sends the requests (see send_all), raises unless every answer is `expect`; returns
    the seconds it took."""
    import uvloop

    started = time.monotonic()
    answers = uvloop.run(send_all(url, requests))
    took = time.monotonic() - started
    if set(answers) != {expect}:
        raise RuntimeError(f"expected every answer {expect}, got {dict(answers)}")
    return took


def value_of(index: int, round_: int = 0) -> bytes:
    """Key `index`'s value in write round `round_`: VALUE_BYTES random bytes of its own,
    so LevelDB's compression does not shrink the data set to nothing (a run of one byte
    repeated would) and the disk figures are those of real values."""
    return random.Random(index * 1_000 + round_).randbytes(VALUE_BYTES)


def puts(keys: Iterable[int], round_: int = 0) -> Iterator[tuple[str, str, bytes | None]]:
    return (("PUT", entity_path(key_name(i)), value_of(i, round_)) for i in keys)


def deletes(keys: Iterable[int]) -> Iterator[tuple[str, str, bytes | None]]:
    return (("DELETE", entity_path(key_name(i)), None) for i in keys)


def same_records(a: Any, b: Any) -> bool:
    return bool(a.local_records() == b.local_records())


def say(*lines: str) -> None:
    print(*lines, sep="\n", flush=True)


def progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


# -- the four figures -------------------------------------------------------------------


def rebuild(cluster: Any, keys: int, rate: float, deadline: float) -> Rebuild:
    """Restarts nodes 1 and 2 at `rate` and waits for their trees, then starts node 3 on
    an empty data folder and times until every record was copied into it."""
    wiped = cluster[2]
    target = wiped.cluster_url
    cluster.stop()
    for node in cluster:
        node.extra_args = node_flags(rate)
    shutil.rmtree(wiped.data_dir)
    peers = cluster.nodes[:2]
    for node in peers:
        node.start(wait=False)
    for node in peers:
        node.wait_ready()
    wait(
        lambda: {node.cluster_url: status(node) for node in peers},
        lambda s: all(n["anti_entropy"]["trees_ready"] for n in s.values()),
        "trees loaded",
        deadline,
    )
    started = time.monotonic()
    wiped.start()
    ready = time.monotonic() - started
    first_copy: float | None = None
    while True:
        now = statuses(cluster)
        count = landed(now, target)
        elapsed = time.monotonic() - started
        if count and first_copy is None:
            first_copy = elapsed
        if count >= keys:
            break
        if elapsed > deadline:
            raise TimeoutError(f"rebuild: {count:,} of {keys:,} records after {deadline:g} s")
        time.sleep(POLL)
    pulled = sum(p["anti_entropy"]["records_received"] for p in now[target]["peers"].values())
    pushed = {
        node: status["peers"][target]["anti_entropy"]["records_sent"]
        for node, status in now.items()
        if node != target
    }
    verified = same_records(wiped, cluster[0])
    return Rebuild(keys, ready, elapsed, first_copy or elapsed, pulled, pushed, verified, rate)


def divergence(cluster: Any, keys: int, share: float, deadline: float, seed: int) -> Divergence:
    down = cluster[2]
    changed = sorted(random.Random(seed).sample(range(keys), max(1, round(keys * share))))
    down.stop()
    send(cluster[0].url, puts(changed, round_=1), 201)
    before = {node.cluster_url: status(node) for node in cluster if node is not down}
    sent_before, received_before = copied(before)
    baseline = {pair: s["exchanges"] for pair, s in exchange_stats(before).items()}
    started = time.monotonic()
    down.start()
    seen: dict[Pair, tuple[int, int]] = {}

    def probe() -> Statuses:
        now = statuses(cluster)
        busiest(seen, now, baseline)
        return now

    wait(probe, lambda s: landed(s, down.cluster_url) >= len(changed), "divergence", deadline)
    converged = time.monotonic() - started
    settled = wait_in_sync_from(cluster, probe, deadline)
    sent, received = copied(settled)
    verified = all(same_records(cluster[0], node) for node in cluster.nodes[1:])
    names = {node.cluster_url: f"node {i + 1}" for i, node in enumerate(cluster)}
    return Divergence(
        keys,
        len(changed),
        converged,
        sent - sent_before,
        received - received_before,
        {pair: figures for pair, figures in seen.items() if figures[1]},
        verified,
        names,
    )


def wait_in_sync_from(cluster: Any, probe: Callable[[], Statuses], deadline: float) -> Statuses:
    before = probe()
    return wait(probe, lambda s: in_sync(before, s), "in sync", deadline)


class Sampler(threading.Thread):
    """Reads every node's status every SAMPLE seconds until stopped: (seconds, records
    copied into `target`). Runs in both windows, so both carry its small load."""

    def __init__(self, cluster: Any, target: str) -> None:
        super().__init__(daemon=True)
        self._cluster, self._target = cluster, target
        self.stopping = threading.Event()
        self.samples: list[tuple[float, int]] = []

    def run(self) -> None:
        started = time.monotonic()
        while True:
            with contextlib.suppress(OSError, RuntimeError):
                count = landed(statuses(self._cluster), self._target)
                self.samples.append((time.monotonic() - started, count))
            if self.stopping.wait(SAMPLE):
                return


def max_rate(url: str, keys: int, folder: Path) -> tuple[float, str]:
    """The most mixed GET/PUT requests a second the cluster answers through `url` (wrk,
    closed model, 64 connections)."""
    from bench.wrk import run_wrk

    script = folder / "mixed.lua"
    script.write_text(mixed_lua(keys, VALUE_BYTES))
    run = run_wrk(url, str(script), MAX_RATE_SECONDS, CONCURRENCY, [])
    how = (
        f"wrk -t1 -c{CONCURRENCY} {MAX_RATE_SECONDS:g} s closed model: p99 {run.p99_ms:.1f} ms, "
        f"{run.errors} errors, wrk CPU {run.cpu_share:.0%}"
        + (" GENERATOR-BOUND" if run.generator_bound else "")
    )
    return run.rate, how


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy since boot (/proc/stat: user,
    nice, system, irq, softirq; not idle, iowait or steal)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, every thread (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def foreign_cores(busy: float, ours: float, seconds: float) -> float:
    """Cores the machine's other processes used on average: its busy CPU seconds less
    ours (nodes, generator, this process) over `seconds` (never below zero: the
    counters tick in 10 ms steps)."""
    return max(0.0, busy - ours) / seconds if seconds > 0 else 0.0


class CpuMeter:
    """The machine's busy CPU and ours (the nodes', this process's and its reaped
    children's: the generator) between `__init__` and `foreign()`."""

    def __init__(self, pids: list[int]) -> None:
        from bench.wrk import children_cpu_seconds

        self._pids = pids
        self._children = children_cpu_seconds
        self._start = self._read()

    def _read(self) -> tuple[float, float, float]:
        ours = sum(process_cpu_seconds(pid) for pid in self._pids)
        ours += time.process_time() + self._children()
        return time.monotonic(), machine_busy_seconds(), ours

    def foreign(self) -> float:
        end = self._read()
        return foreign_cores(
            end[1] - self._start[1], end[2] - self._start[2], end[0] - self._start[0]
        )


def wait_quiet(pids: list[int], patience: float) -> float:
    """Waits, up to `patience` seconds, for a second in which the machine's other
    processes use less than QUIET_CORES (this 2-core machine is shared: another test run
    halves what the nodes get and makes a latency figure meaningless); returns the cores
    they used in the last second measured."""
    started = time.monotonic()
    while True:
        meter = CpuMeter(pids)
        time.sleep(1.0)
        used = meter.foreign()
        if used < QUIET_CORES or time.monotonic() - started > patience:
            return used


def constant_rate(
    url: str, keys: int, rate: float, window: float, use_vegeta: bool, seed: int, pids: list[int]
) -> Foreground:
    meter = CpuMeter(pids)
    if use_vegeta:
        from bench.vegeta import attack, target_count

        report = attack(
            mixed_targets(url, keys, target_count(rate, window), VALUE, seed),
            rate,
            window,
            REQUEST_TIMEOUT,
        )
        return Foreground(
            report.rate,
            report.percentile_ms("p50"),
            report.percentile_ms("p99"),
            report.requests,
            report.failures,
            report.sent_rate,
            report.generator_cores,
            meter.foreign(),
            report.percentile_ms("p90"),
            report.percentile_ms("p95"),
            report.percentile_ms("max"),
        )
    import uvloop

    from bench.constant_rate import run
    from bench.workload import Workload

    cpu = time.process_time()
    result = uvloop.run(
        run(url, rate, window, Workload("mixed", keys, VALUE), CONCURRENCY, REQUEST_TIMEOUT, seed)
    )
    return Foreground(
        rate,
        result.percentile_ms(50),
        result.percentile_ms(99),
        result.sent,
        result.errors,
        result.sent / window,
        (time.process_time() - cpu) / max(window, result.elapsed),
        meter.foreign(),
        result.percentile_ms(90),
        result.percentile_ms(95),
        result.percentile_ms(100),
    )


def foreground(
    cluster: Any,
    keys: int,
    window: float,
    fixed_rate: float,
    rate: float,
    deadline: float,
    folder: Path,
    seed: int,
    patience: float,
) -> ForegroundFigure:
    """The cluster runs at `--anti-entropy-rate rate` and is in sync. A window whose
    other processes took more than QUIET_CORES is measured once more (the busy one only
    if the rebuild is still running), and the quieter of the two is kept."""
    from bench.vegeta import CONNECTIONS, VEGETA

    def pids() -> list[int]:
        return [node.process.pid for node in cluster if node.process is not None]

    use_vegeta = VEGETA.is_file()
    url, wiped = cluster[0].url, cluster[2]
    if fixed_rate:
        highest, how = fixed_rate * 2, "--foreground-rate given"
    else:
        wait_quiet(pids(), patience)
        meter = CpuMeter(pids())
        highest, how = max_rate(url, keys, folder)
        how += f", other processes {meter.foreign():.2f} cores"
        wait_in_sync(cluster, deadline)  # its PUTs reach the third replica late
    load = highest / 2
    if use_vegeta:
        generator = (
            f"vegeta {VEGETA} (open model: sends at the rate whatever the server does, "
            f"{CONNECTIONS} connections at most, {REQUEST_TIMEOUT:g} s time-out), mixed GET/PUT "
            "alternately over the loaded keys, on the same 2 cores as the nodes"
        )
    else:
        load = min(load, PYTHON_GENERATOR_CAP)
        generator = (
            "bench/constant_rate.py run() (Python open model, latency from the intended send "
            f"time; vegeta not found), {CONCURRENCY} connections, capped at "
            f"{PYTHON_GENERATOR_CAP:,.0f}/s"
        )

    def measured(seed_offset: int) -> tuple[Foreground, list[int]]:
        """One window, with the sampler reading the nodes' status meanwhile; returns the
        records copied into node 3 at each sample."""
        sampler = Sampler(cluster, wiped.cluster_url)
        sampler.start()
        began = datetime.datetime.now()
        try:
            result = constant_rate(url, keys, load, window, use_vegeta, seed + seed_offset, pids())
        finally:
            sampler.stopping.set()
            sampler.join()
        ended = datetime.datetime.now()
        counts = tuple(compactions_between(node, began, ended) for node in cluster)
        result = dataclasses.replace(result, compactions=counts)
        return result, [count for _, count in sampler.samples]

    progress(f"foreground: {load:,.0f} req/s, no exchange running")
    wait_quiet(pids(), patience)
    idle, _ = measured(0)
    idle_attempts = 1
    if idle.foreign_cores > QUIET_CORES:
        wait_quiet(pids(), patience)
        again, _ = measured(10)
        idle, idle_attempts = min(idle, again, key=lambda w: w.foreign_cores), 2
    wait_quiet(pids(), patience)  # before the wipe: the rebuild must not end meanwhile
    wipe_and_restart(wiped)
    wait(
        lambda: statuses(cluster),
        lambda s: landed(s, wiped.cluster_url) > 0,
        "rebuild started",
        deadline,
    )
    progress(f"foreground: {load:,.0f} req/s, rebuild running")
    busy, counts = measured(1)
    busy_attempts = 1

    def still_running(counts: list[int]) -> bool:
        return len(counts) >= 2 and counts[-1] > counts[-2]

    if busy.foreign_cores > QUIET_CORES and still_running(counts):
        again, again_counts = measured(11)
        busy_attempts = 2
        if again.foreign_cores < busy.foreign_cores and still_running(again_counts):
            busy, counts = again, again_counts
    copied_in_window = counts[-1] - counts[0] if counts else 0
    # The copy rate with no traffic: the rebuild goes on after the window.
    first = landed(statuses(cluster), wiped.cluster_url)
    time.sleep(QUIET_SAMPLE)
    quiet_rate = (landed(statuses(cluster), wiped.cluster_url) - first) / QUIET_SAMPLE
    return ForegroundFigure(
        generator,
        highest,
        how,
        idle,
        busy,
        copied_in_window,
        window,
        still_running(counts),
        rate,
        quiet_rate,
        keys,
        (idle_attempts, busy_attempts),
    )


def tombstones(cluster: Any, keys: int, deadline: float, rate: float) -> Tombstones:
    """On a cluster holding the keys: restarts it with `--tombstone-grace 1`, deletes every
    key and measures the LevelDB folders until every tombstone is gone (or `deadline`
    passed, which is reported), then stops the nodes and compacts their databases."""
    restart_all(cluster, node_flags(rate, grace=1.0))
    progress("tombstones: waiting for the cluster to be in sync")
    wait_in_sync(cluster, deadline)

    def sizes() -> list[int]:
        return [leveldb_bytes(node) for node in cluster]

    before_deletes = sizes()
    progress(f"tombstones: deleting {keys:,} keys")
    delete_s = send(cluster[0].url, deletes(range(keys)), 202)
    deleted_at = time.monotonic()
    after_deletes = sizes()
    before = copied(statuses(cluster))
    progress("tombstones: waiting for the collection")
    collect_s: float | None = None
    gone_s: float | None = None
    left = [-1] * len(cluster)
    while time.monotonic() - deleted_at < deadline:
        now = statuses(cluster)
        if collect_s is None and all(n["tombstones"]["collected"] >= keys for n in now.values()):
            collect_s = time.monotonic() - deleted_at
        if collect_s is not None:
            # `collected` counts a tombstone again each time it is collected (after it was
            # copied back): only the records themselves say that every one is gone.
            left = [len(node.local_records()) for node in cluster]
            if not any(left):
                gone_s = time.monotonic() - deleted_at
                break
        time.sleep(1.0)
    else:
        left = [len(node.local_records()) for node in cluster]
    time.sleep(2 * INTERVAL)  # a little time for LevelDB's own compactions
    settled = statuses(cluster)
    after = copied(settled)
    after_collection = sizes()
    collected = [settled[node.cluster_url]["tombstones"]["collected"] for node in cluster]
    cluster.stop()
    after_stop = sizes()
    for node in cluster:
        compact(node)
    after_compaction = sizes()
    return Tombstones(
        keys,
        len(cluster),
        before_deletes,
        after_deletes,
        after_collection,
        after_stop,
        after_compaction,
        collected,
        left,
        collect_s,
        gone_s,
        sum(after) - sum(before),
        delete_s,
        deadline,
    )


# -- main -------------------------------------------------------------------------------


def node_log_problems(cluster: Any, name: str = "node") -> list[str]:
    problems = []
    for index, node in enumerate(cluster):
        if node.log_path and node.log_path.exists():
            lines = node.log_path.read_text(errors="replace").splitlines()
            problems += [f"{name} {index + 1}: {line}" for line in log_problems(lines)]
    return problems


def run_scenarios(args: argparse.Namespace, chosen: list[str], root: Path) -> dict[str, Any]:
    """Runs the chosen figures in order, printing each; one that fails (a time-out, a
    node that does not start) is reported and the next one runs."""
    from tests.launcher import Cluster

    results: dict[str, Any] = {}
    problems: list[str] = []
    first_rate = args.rate if "foreground" in chosen else args.fast_rate
    needs_cluster = bool(set(chosen) - {"tombstones"}) or args.tombstone_nodes == 3
    cluster = Cluster(root / "cluster", 3 if needs_cluster else 0, node_flags(first_rate))
    cluster.start()

    def attempt(name: str, run: Callable[[], Any]) -> None:
        try:
            results[name] = run()
        except (TimeoutError, RuntimeError, OSError) as error:
            say(f"{name}: FAILED: {type(error).__name__}: {str(error)[:400]}")
            results.setdefault("failed", []).append(name)
        else:
            say(*results[name].lines())

    try:
        if needs_cluster:
            took = send(cluster[0].url, puts(range(args.keys)), 201)
            say(f"loaded {args.keys:,} keys in {seconds(took)} ({args.keys / took:,.0f} PUT/s)")
            wait_in_sync(cluster, args.deadline)
        if "foreground" in chosen:
            attempt(
                "foreground",
                lambda: foreground(
                    cluster,
                    args.keys,
                    args.window,
                    args.foreground_rate,
                    args.rate,
                    args.deadline,
                    root,
                    args.seed,
                    args.patience,
                ),
            )
        if "rebuild" in chosen:
            progress(f"rebuild: wiping node 3 (--anti-entropy-rate {args.fast_rate:g})")
            attempt("rebuild", lambda: rebuild(cluster, args.keys, args.fast_rate, args.deadline))
        if "divergence" in chosen:
            progress("divergence: node 3 down, overwriting")
            if "rebuild" not in chosen:  # node 3 may still be rebuilding: fast, then in sync
                restart_all(cluster, node_flags(args.fast_rate))
            wait_in_sync(cluster, args.deadline)
            attempt(
                "divergence",
                lambda: divergence(cluster, args.keys, args.divergence, args.deadline, args.seed),
            )
        if "tombstones" in chosen and args.tombstone_nodes == 3:
            attempt(
                "tombstones", lambda: tombstones(cluster, args.keys, args.deadline, args.fast_rate)
            )
    finally:
        cluster.stop()
        problems += node_log_problems(cluster)
    if "tombstones" in chosen and args.tombstone_nodes == 1:
        single = Cluster(root / "single", 1, node_flags(args.fast_rate, grace=1.0)).start()
        try:
            took = send(single[0].url, puts(range(args.keys)), 201)
            say(f"one node: loaded {args.keys:,} keys in {seconds(took)}")
            attempt(
                "tombstones", lambda: tombstones(single, args.keys, args.deadline, args.fast_rate)
            )
        finally:
            single.stop()
            problems += node_log_problems(single, "single node")
    results["problems"] = problems
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.anti_entropy", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--keys", type=int, default=DEFAULT_KEYS, help="(default 100000)")
    parser.add_argument("--quick", action="store_true", help="10,000 keys, 5 s windows")
    parser.add_argument("--only", action="append", choices=SCENARIOS, help="(repeatable)")
    parser.add_argument(
        "--fast-rate", type=float, default=FAST_RATE, help="rebuild's rate cap (default 20000)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE,
        help=f"--anti-entropy-rate during the foreground windows (default {DEFAULT_RATE:g})",
    )
    parser.add_argument("--divergence", type=float, default=0.01, help="(default 0.01)")
    parser.add_argument(
        "--window",
        type=float,
        default=WINDOW,
        help=f"seconds per foreground window (default {WINDOW:g}: more than the ~25 s "
        "between LevelDB compactions at that write rate)",
    )
    parser.add_argument(
        "--foreground-rate", type=float, default=0.0, help="fixed rate (default: half the max)"
    )
    parser.add_argument(
        "--tombstone-nodes",
        type=int,
        choices=(1, 3),
        default=1,
        help="1: a node of its own, loaded for it (default); 3: the cluster, where "
        "collection also waits on the exchanges between the nodes",
    )
    parser.add_argument(
        "--deadline", type=float, default=300.0, help="per wait, seconds (default 300)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--patience",
        type=float,
        default=30.0,
        help="seconds to wait for a quiet machine before a foreground window (default 30)",
    )
    args = parser.parse_args()
    if args.quick:
        args.keys = QUICK_KEYS if args.keys == DEFAULT_KEYS else args.keys
        args.window = min(args.window, 5.0)
    chosen = args.only or list(SCENARIOS)
    if "foreground" in chosen and not args.foreground_rate and shutil.which("wrk") is None:
        sys.exit("wrk not found (make bench-tools), or give --foreground-rate")
    say(
        f"3 nodes on 127.0.0.1, --hint-max-bytes 0 --anti-entropy-interval {INTERVAL:g}, "
        f"{args.keys:,} keys of {VALUE_BYTES} random bytes, on {platform.node()} "
        f"({os.cpu_count()} cores, Python {platform.python_version()})"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-ae-") as tmp:
        results = run_scenarios(args, chosen, Path(tmp))
    problems = results["problems"]
    expected = sum(any(e in line for e in EXPECTED_LOG) for line in problems)
    say(
        f"node logs: {len(problems)} warnings or errors"
        + (f" ({expected} of them circuits opening to the stopped node 3):" if problems else ""),
        *problems[:20],
        f"failed: {', '.join(results['failed'])}" if results.get("failed") else "failed: none",
        f"took {seconds(time.monotonic() - started)}",
        "",
        "```markdown",
        markdown(
            args.keys,
            results.get("rebuild"),
            results.get("divergence"),
            results.get("foreground"),
            results.get("tombstones"),
        ),
        "```",
    )


if __name__ == "__main__":
    main()
