"""A wall clock skewed from outside, per process: libfaketime preloaded into a node's
command, its offset read from a file of that node's that the test bed rewrites while the
node runs. The node's own code knows nothing of it, whatever language it is written in,
as long as it reads the time through the C library (CPython, the JVM, anything linked
against glibc); its monotonic clock is left alone, so timers and timeouts keep working
(a JVM hangs when its monotonic clock is faked, libfaketime's README says).

How libfaketime is driven: `LD_PRELOAD` names the library, `FAKETIME_TIMESTAMP_FILE`
the file holding the offset (`+30`, `-10`, `+0`), `FAKETIME_NO_CACHE=1` makes it read the
file on every call (about 3 µs a call here; without it a change takes up to 10 s), and
`FAKETIME_DONT_FAKE_MONOTONIC=1` leaves CLOCK_MONOTONIC real (and
`FAKETIME_FORCE_MONOTONIC_FIX=0` keeps timed waits on it right). The file is replaced
atomically, so a reader sees the old offset or the new one, never half of one.

What cannot be faked this way, and is said rather than hidden:
- a Go program: its runtime reads the clock through the vDSO (or a raw system call),
  never through libc, so the preloaded library, even when loaded (a cgo binary), is
  never asked; a pure Go binary is static and does not load it at all (`reach` names
  both);
- a static binary of any language, and a command that clears its environment;
- Debian 12's libfaketime 0.9.10 breaks `clock_nanosleep(CLOCK_MONOTONIC,
  TIMER_ABSTIME)` when the monotonic clock is not faked (wolfcw/libfaketime#426, fixed
  in 0.9.11): Python 3.11's `time.sleep` fails there with EINVAL. Waits on a lock or an
  event, asyncio, and the JVM's sleeps are not affected.

libfaketime leaves a shared-memory segment and a semaphore in /dev/shm for each process
that loaded it first (named by its pid), and a later process given the same pid trips
over them; `release` removes those of a process that has exited.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
import time
from functools import cache
from pathlib import Path

LIBRARY_NAME = "libfaketime.so.1"
# Where the library is looked for first, for a build of one's own.
LIBRARY_ENV = "DHT_LIBFAKETIME"
# Where distributions put it: Debian's multiarch folder, then the others' and make
# install's.
LIBRARY_FOLDERS = ("/usr/lib/faketime", "/usr/lib64/faketime", "/usr/local/lib/faketime")
SHARED_MEMORY = Path("/dev/shm")
# The probe's offset: far enough that no scheduling delay passes for it.
PROBE_OFFSET = 3600.0
PROBE_TOLERANCE = 60.0
# The bytes that open a Go binary's build information (debug/buildinfo).
GO_BUILD_INFO = b"\xff Go buildinf:"


def library_candidates() -> list[Path]:
    """Where libfaketime may be, in the order it is looked for."""
    named = os.environ.get(LIBRARY_ENV)
    folders = [Path(named).parent] if named else []
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        folders.append(Path("/usr/lib") / multiarch / "faketime")
    machine = platform.machine()
    folders += sorted(Path("/usr/lib").glob(f"{machine}-*/faketime"))
    folders += [Path(folder) for folder in LIBRARY_FOLDERS]
    return [Path(named)] if named else [folder / LIBRARY_NAME for folder in folders]


def find_library() -> Path | None:
    return next((path for path in library_candidates() if path.is_file()), None)


def offset_text(seconds: float) -> str:
    """The offset as libfaketime reads it: `+30`, `-10`, `+0.5` (whole seconds without
    a decimal point, so that no locale's decimal comma can misread them)."""
    if float(seconds).is_integer():
        return f"{int(seconds):+d}"
    return f"{seconds:+.3f}".rstrip("0")


def preload_environment(library: Path, offset_file: Path) -> dict[str, str]:
    """What a process's environment needs for its wall clock to follow `offset_file`."""
    preload = os.environ.get("LD_PRELOAD", "")
    return {
        "LD_PRELOAD": f"{library}:{preload}" if preload else str(library),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # The "monotonic fix" (on by default with a recent glibc) is for a faked
        # monotonic clock; with the real one it misplaces the deadline of every timed
        # wait on a monotonic condition variable: CPython's GIL hand-over (and so every
        # thread switch) then took 20 ms instead of 0.1.
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
    }


def write_offset(offset_file: Path, seconds: float) -> None:
    """Replaces the file at once: a process reading it sees one offset or the other."""
    partial = offset_file.with_name(offset_file.name + ".partial")
    partial.write_text(offset_text(seconds) + "\n")
    os.replace(partial, offset_file)


def release(pid: int) -> None:
    """Removes what libfaketime left in /dev/shm for process `pid`, once it has exited."""
    for name in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"):
        (SHARED_MEMORY / name).unlink(missing_ok=True)


@cache
def unavailable() -> str | None:
    """None when the fake clock works on this machine, else the reason in one line: it
    runs this Python under it at an offset of an hour and reads the time it prints."""
    if sys.platform != "linux":
        return f"a fake clock needs Linux's LD_PRELOAD (libfaketime); this is {sys.platform}"
    library = find_library()
    if library is None:
        return (
            f"libfaketime is not installed ({LIBRARY_NAME} not found in "
            f"{', '.join(sorted({str(path.parent) for path in library_candidates()}))}; "
            "apt-get install libfaketime)"
        )
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    offset_file = folder / f"dht-fake-clock-probe-{os.getpid()}"
    write_offset(offset_file, PROBE_OFFSET)
    probe = subprocess.Popen(
        [sys.executable, "-c", "import time; print(time.time())"],
        env=os.environ | preload_environment(library, offset_file),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        output, errors = probe.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        probe.kill()
        output, errors = probe.communicate()
    finally:
        offset_file.unlink(missing_ok=True)
        release(probe.pid)
    try:
        shown = float(output.strip()) - time.time() if probe.returncode == 0 else None
    except ValueError:
        shown = None
    if shown is None:
        last = (errors.strip().splitlines() or ["no output"])[-1]
        return f"a process with {library} preloaded failed: {last}"
    if abs(shown - PROBE_OFFSET) > PROBE_TOLERANCE:
        return f"{library} is preloaded but does not move a process's clock ({shown:+.0f} s)"
    return None


def process_tree(pid: int) -> list[int]:
    """`pid` and every process descended from it, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending += children.get(current, [])
    return tree


def reach(pid: int) -> str | None:
    """None when the fake clock reaches the process `pid` started (it, or a process it
    started, has libfaketime loaded, and none is a Go binary); else why not, in one line."""
    loaded = False
    for member in process_tree(pid):
        proc = Path("/proc") / str(member)
        try:
            maps = (proc / "maps").read_text()
            executable = (proc / "exe").read_bytes()
            path = os.readlink(proc / "exe")
        except OSError:
            continue  # exited meanwhile
        if GO_BUILD_INFO in executable:
            return (
                f"{path} is a Go binary: Go reads the clock through the vDSO, never "
                "through libc, so libfaketime cannot move it"
            )
        loaded = loaded or LIBRARY_NAME in maps
    if not loaded:
        return (
            f"no process of the node has {LIBRARY_NAME} loaded: a static binary, or a "
            "command that clears its environment"
        )
    return None


class FakeClock:
    """One offset file per node in `folder`, each starting at +0 (the true time)."""

    def __init__(self, folder: Path, count: int) -> None:
        library = find_library()
        if library is None:
            raise RuntimeError(unavailable() or "libfaketime not found")
        folder.mkdir(parents=True, exist_ok=True)
        self._library = library
        self._files = [folder / f"node-{index}.faketime" for index in range(count)]
        self._offsets = [0.0] * count
        for offset_file in self._files:
            write_offset(offset_file, 0.0)

    def environment(self, node_index: int) -> dict[str, str]:
        """What to add to node `node_index`'s environment."""
        return preload_environment(self._library, self._files[node_index])

    def set_offset(self, node_index: int, seconds: float) -> None:
        """Node `node_index`'s wall clock is `seconds` off the true time from now on
        (negative: behind), whether it runs or starts later."""
        write_offset(self._files[node_index], seconds)
        self._offsets[node_index] = seconds

    def offset(self, node_index: int) -> float:
        return self._offsets[node_index]
