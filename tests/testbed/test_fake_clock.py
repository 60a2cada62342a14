"""The fake clock (dht/testbed/fake_clock.py) on real processes: the offset reaches a
Python process and a JVM, at start and while they run, and a Go binary's clock cannot
be moved this way (its runtime reads the clock through the vDSO, not libc): the test
shows that rather than assume it. Skipped where libfaketime cannot run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dht.testbed import fake_clock
from dht.testbed.fake_clock import FakeClock

# How far a printed time may be from the true time plus the offset: a process's start,
# and the 2-core machine's load, come in between.
TOLERANCE = 2.0
OFFSETS = (30.0, -30.0)
JAVA_MAIN = """\
public class Main {
    public static void main(String[] args) {
        System.out.println(System.currentTimeMillis() / 1000.0);
    }
}
"""
GO_MAIN = """\
package main

import (
\t"fmt"
\t"os"
\t"time"
)

func main() {
\tfmt.Printf("%.3f\\n", float64(time.Now().UnixNano())/1e9)
\tif len(os.Args) > 1 { // stay, for a look at the running process
\t\ttime.Sleep(5 * time.Second)
\t}
}
"""


@pytest.fixture
def clock(tmp_path: Path) -> FakeClock:
    reason = fake_clock.unavailable()
    if reason is not None:
        pytest.skip(f"no fake clock here: {reason}")
    return FakeClock(tmp_path / "clocks", 1)


def printed_offset(clock: FakeClock, argv: list[str], cwd: Path | None = None) -> float:
    """Runs `argv` (which prints the epoch time in seconds) under the fake clock and
    returns how far the time it printed is from the true time around it."""
    before = time.time()
    process = subprocess.Popen(
        argv,
        env=os.environ | clock.environment(0),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        output, errors = process.communicate(timeout=120)
    finally:
        fake_clock.release(process.pid)
    after = time.time()
    assert process.returncode == 0, errors
    shown = float(output.split()[-1])
    # Somewhere between the start and the exit: the offset is the one that fits.
    return min(shown - before, shown - after, key=lambda seen: abs(seen - clock.offset(0)))


@pytest.mark.parametrize("offset", OFFSETS)
def test_a_python_process_sees_the_offset(clock: FakeClock, offset: float) -> None:
    clock.set_offset(0, offset)
    seen = printed_offset(clock, [sys.executable, "-c", "import time; print(time.time())"])
    assert abs(seen - offset) <= TOLERANCE, seen


@pytest.mark.parametrize("offset", OFFSETS)
def test_a_jvm_sees_the_offset(clock: FakeClock, offset: float, tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    (tmp_path / "Main.java").write_text(JAVA_MAIN)
    clock.set_offset(0, offset)
    seen = printed_offset(clock, [java, "Main.java"], cwd=tmp_path)
    assert abs(seen - offset) <= TOLERANCE, seen


def go_tool() -> str | None:
    return shutil.which("go") or next(
        (path for path in ("/usr/local/go/bin/go",) if Path(path).is_file()), None
    )


@pytest.fixture(scope="module", params=["static", "cgo-external"])
def go_binary(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A Go program printing time.Now(), built pure (static, the default without a C
    compiler's help) or with cgo and the external linker (dynamic: libfaketime loads).
    Built once for every offset, with one build cache for both: a build from an empty
    cache compiles Go's runtime, about 35 s of a core."""
    go = go_tool()
    if go is None:
        pytest.skip("no Go toolchain")
    tmp_path = tmp_path_factory.mktemp(f"go-{request.param}")
    (tmp_path / "main.go").write_text(GO_MAIN)
    (tmp_path / "go.mod").write_text("module clock\n\ngo 1.21\n")
    flags = ["-ldflags=-linkmode=external"] if request.param == "cgo-external" else []
    environment = os.environ | {
        "CGO_ENABLED": "1" if request.param == "cgo-external" else "0",
        "GOCACHE": str(tmp_path_factory.getbasetemp() / "gocache"),
        "GOFLAGS": "-mod=mod",
    }
    built = subprocess.run(
        [go, "build", *flags, "-o", "clock", "."],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if built.returncode != 0:
        pytest.skip(f"go build failed: {built.stderr.strip()[-200:]}")
    yield tmp_path / "clock"


@pytest.mark.parametrize("offset", OFFSETS)
def test_a_go_binary_does_not_see_the_offset_and_reach_says_why(
    clock: FakeClock, go_binary: Path, offset: float
) -> None:
    """What is true, pinned: Go's time.Now() reads the clock through the vDSO, so
    neither a static build (LD_PRELOAD ignored) nor a dynamic one with cgo (libfaketime
    loaded, never called for the time) sees the offset; `reach` names it a Go binary,
    so the clock tier skips such a node instead of passing it unskewed."""
    clock.set_offset(0, offset)
    seen = printed_offset(clock, [str(go_binary)])
    assert abs(seen) <= TOLERANCE, seen
    process = subprocess.Popen(
        [str(go_binary), "stay"], env=os.environ | clock.environment(0), stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()  # it runs
        why = fake_clock.reach(process.pid)
        assert why is not None and "is a Go binary" in why, why
    finally:
        process.kill()
        process.wait()
        fake_clock.release(process.pid)


def test_a_running_python_process_follows_each_change_of_the_offset(clock: FakeClock) -> None:
    """A process printing its offset every 0.2 s: each new offset shows up in what it
    prints (it waits on an event, not time.sleep: see the next test)."""
    program = (
        "import threading, time\n"
        "tick = threading.Event()\n"
        "while True:\n"
        "    print(round(time.time() - time.monotonic(), 1), flush=True)\n"
        "    tick.wait(0.2)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program],
        env=os.environ | clock.environment(0),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        base = float(process.stdout.readline())  # at +0
        for offset in (-10.0, 5.0, 0.0):
            clock.set_offset(0, offset)
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                if abs(float(process.stdout.readline()) - base - offset) <= 0.5:
                    break
            else:
                pytest.fail(f"the running process never showed the offset {offset:+g}")
    finally:
        process.kill()
        process.wait()
        fake_clock.release(process.pid)


def test_python_sleep_under_the_fake_clock(clock: FakeClock) -> None:
    """libfaketime 0.9.10 (Debian 12) miscomputes clock_nanosleep(CLOCK_MONOTONIC,
    TIMER_ABSTIME) when the monotonic clock is not faked (wolfcw/libfaketime#426), and
    Python 3.11's time.sleep uses exactly that: it fails with EINVAL. A Python node that
    sleeps cannot be put under this fake clock there; a newer libfaketime passes."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(0.01)"],
        env=os.environ | clock.environment(0),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, errors = process.communicate(timeout=30)
    finally:
        fake_clock.release(process.pid)
    if process.returncode != 0:
        assert "Invalid argument" in errors, errors
        pytest.xfail("libfaketime#426: time.sleep fails with EINVAL under this libfaketime")
