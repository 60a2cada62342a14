"""Runs vegeta (an open-model generator: it sends at a fixed rate whatever the server
does, in Go, far past what a Python generator reaches here) and reads its JSON report.

Targets come from Python on vegeta's stdin (`-format=json -lazy`), one JSON line each,
made lazily by a writer thread, so a PUT run can write as many new keys as it sends
without building them all first. vegeta writes its results to a file and `vegeta report`
reads them after the attack, so decoding them does not take CPU from the server under
test. The CPU time vegeta used is measured too: the evidence that a figure is the
server's and not the generator's.
"""

from __future__ import annotations

import base64
import json
import math
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bench.wrk import children_cpu_seconds
from locustfiles.prefill import key_name

VEGETA = Path(__file__).resolve().parents[1] / ".tools" / "bin" / "vegeta"
VALUE = b"v" * 100
# vegeta paces sends from a timer; under this share of the requested rate it fell behind.
KEPT_PACE = 0.98
# vegeta's JSON names for the percentiles it reports, and how the report labels them.
PERCENTILES = {"50th": "p50", "90th": "p90", "95th": "p95", "99th": "p99", "max": "max"}
# Targets written beyond rate x duration, so vegeta never runs out ("no targets to attack")
# because of rounding at the end of the run.
SPARE_TARGETS = 64
# Connections to the server, as bench.constant_rate and wrk -c64 use. vegeta starts a
# request on schedule whatever happens (a new goroutine if all are busy); past this many
# connections a request waits for one, and that wait counts in its latency. Unbounded,
# a short stall would make vegeta open hundreds of connections, and accepting them
# would cost the server more than the stall did.
CONNECTIONS = 64
WRITE_BATCH = 256


@dataclass(frozen=True)
class Report:
    """One vegeta run: the requested `rate`, what vegeta sent (`sent_rate`: requests
    over the time it spent sending) and got back (`throughput`: successful answers per
    second until the last one), latencies in ms by label (p50 .. max), answers by status
    (0: no answer: time-out, refused connection), vegeta's error messages, and the CPU
    seconds vegeta used over the `seconds` it ran."""

    rate: float
    requests: int
    sent_rate: float
    throughput: float
    latencies_ms: dict[str, float]
    status_codes: dict[int, int]
    errors: tuple[str, ...] = ()
    cpu_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def failures(self) -> int:
        """Requests without a 2xx/3xx answer (a 404 counts: every key read exists)."""
        return sum(n for code, n in self.status_codes.items() if not 200 <= code < 400)

    @property
    def kept_pace(self) -> bool:
        """vegeta sent at the requested rate: if not, the generator set the rate."""
        return self.sent_rate >= KEPT_PACE * self.rate

    @property
    def generator_cores(self) -> float:
        return self.cpu_seconds / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_seconds / self.requests * 1e6 if self.requests else 0.0

    def percentile_ms(self, label: str) -> float:
        return self.latencies_ms[label]


def parse_report(text: str, rate: float, cpu_seconds: float = 0.0, seconds: float = 0.0) -> Report:
    """Reads `vegeta report -type=json` (latencies in nanoseconds); raises ValueError
    naming a missing field rather than reading it as zero."""
    try:
        data: dict[str, Any] = json.loads(text)
        latencies = data["latencies"]
        return Report(
            rate=rate,
            requests=int(data["requests"]),
            sent_rate=float(data["rate"]),
            throughput=float(data["throughput"]),
            latencies_ms={label: latencies[name] / 1e6 for name, label in PERCENTILES.items()},
            status_codes={int(code): int(n) for code, n in (data["status_codes"] or {}).items()},
            errors=tuple(data.get("errors") or ()),
            cpu_seconds=cpu_seconds,
            seconds=seconds,
        )
    except (KeyError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"not a vegeta JSON report ({error!r}): {text[:200]!r}") from error


def target_count(rate: float, seconds: float) -> int:
    """How many targets a run needs: vegeta sends rate x duration, plus a few spare."""
    return math.ceil(rate * seconds) + SPARE_TARGETS


def put_targets(url: str, prefix: str, replicas: str | None, count: int) -> Iterator[str]:
    """`count` PUT target lines, each to a key no other line (or run, given a fresh
    `prefix`) writes: a PUT benchmark must not turn into overwrites."""
    body = base64.b64encode(VALUE).decode()
    suffix = f"&replicas={replicas}" if replicas else ""
    for index in range(count):
        entity = f"{url}/v0/entity?id={key_name(index, prefix)}{suffix}"
        yield f'{{"method":"PUT","url":"{entity}","body":"{body}"}}\n'


def get_targets(
    url: str, keys: int, replicas: str | None, count: int, seed: int = 0
) -> Iterator[str]:
    """`count` GET target lines, uniform over the prefilled keys 0 .. keys - 1."""
    draw = random.Random(seed).randrange
    suffix = f"&replicas={replicas}" if replicas else ""
    for _ in range(count):
        yield f'{{"method":"GET","url":"{url}/v0/entity?id={key_name(draw(keys))}{suffix}"}}\n'


def feed(stdin: IO[bytes], lines: Iterable[str]) -> None:
    """Writes target lines to vegeta's stdin, in batches, then closes it. vegeta stops
    reading once its duration is over: the broken pipe that follows is the normal end."""
    try:
        batch: list[str] = []
        for line in lines:
            batch.append(line)
            if len(batch) == WRITE_BATCH:
                stdin.write("".join(batch).encode())
                batch.clear()
        stdin.write("".join(batch).encode())
    except BrokenPipeError:
        pass
    finally:
        try:
            stdin.close()
        except BrokenPipeError:
            pass


def check_vegeta(vegeta: Path = VEGETA) -> Path:
    """The vegeta binary, or SystemExit saying how to get it."""
    if not vegeta.is_file():
        raise SystemExit(f"vegeta not found at {vegeta}: run `make bench-tools`")
    return vegeta


def attack(
    targets: Iterable[str],
    rate: float,
    seconds: float,
    timeout: float = 2.0,
    vegeta: Path = VEGETA,
    connections: int = CONNECTIONS,
) -> Report:
    """Sends `targets` at `rate` per second (rounded: vegeta takes whole requests per
    second) for `seconds`, each request giving up after `timeout`, and reports it. The
    CPU time is the delta of the reaped children's: only vegeta is reaped meanwhile."""
    rate = max(1, round(rate))
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.bin"
        command = [
            str(check_vegeta(vegeta)),
            "attack",
            f"-rate={rate}/1s",
            f"-duration={seconds:g}s",
            f"-timeout={timeout:g}s",
            "-format=json",
            "-lazy",
            f"-max-connections={connections}",
            f"-connections={connections}",
            "-max-body=0",  # the answers' bodies are not read: do not keep them
            f"-output={results}",
        ]
        cpu_before, started = children_cpu_seconds(), time.monotonic()
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdin is not None and process.stderr is not None
        writer = threading.Thread(target=feed, args=(process.stdin, targets), daemon=True)
        writer.start()
        stderr = process.stderr.read()
        process.wait()
        elapsed, cpu = time.monotonic() - started, children_cpu_seconds() - cpu_before
        writer.join()
        if process.returncode != 0:
            raise RuntimeError(f"vegeta attack failed: {stderr.decode(errors='replace')}")
        report = subprocess.run(
            [str(vegeta), "report", "-type=json", str(results)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return parse_report(report, rate, cpu_seconds=cpu, seconds=elapsed)
