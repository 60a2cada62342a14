"""The anti-entropy benchmark's figures and how they read (pure): one result class per
figure with its printed lines, the Markdown block for a note, and the printing itself."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from bench.exchange_status import Pair, expected_differing_leaves
from dht.config import NodeConfig
from dht.model.merkle import LEAVES

DEFAULT_RATE = NodeConfig.anti_entropy_rate
P99_TARGET = 0.20  # the foreground p99 may rise by less than this share


def relative_change(before: float, after: float) -> float:
    return (after - before) / before if before else float("inf")


def size(count: float) -> str:
    """Bytes as MiB with the exact count: `12.3 MiB (12,902,400 B)`."""
    return f"{count / 2**20:,.1f} MiB ({count:,.0f} B)"


def seconds(value: float) -> str:
    return f"{value:.1f} s"


def say(*lines: str) -> None:
    print(*lines, sep="\n", flush=True)


def progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


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
