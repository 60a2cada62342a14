"""Power loss, applied from outside to processes that know nothing of it: their folder is
a mount of the lazy filesystem (`lazy_filesystem.py`), which keeps what was not fsynced
in memory, and a power cut drops it. Linux only, as root, with FUSE.

    handle = mount(backing, mountpoint)   # serve `backing` at `mountpoint`
    ...                                   # processes write under `mountpoint`
    handle.power_cut()                    # all that was not fsynced is gone
    handle.unmount()                      # always: also when the filesystem was killed

Mounted with a `capacity` (bytes), it is a volume of that size (`capacity.py`), and
`fill()` takes every free byte with a ballast file (`ballast.py`), `free()` removes it:
a full disk on the same filesystem that can cut the power.

`power_loss_unavailable()` says in one line why it cannot be used here (not root, no
/dev/fuse, no fusermount3, no mfusepy or libfuse3), so a caller skips with that reason;
`mount` raises `PowerLossUnavailable` with it.

By hand, in one shell `python -m dht.testbed.power_loss mount BACKING MOUNTPOINT
[--capacity BYTES]` (in the foreground until Ctrl-C or `fusermount3 -u MOUNTPOINT`), in another
`python -m dht.testbed.power_loss cut MOUNTPOINT` (or `unsynced MOUNTPOINT`). The control
socket is MOUNTPOINT.control, beside the mount point.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from dht.testbed import ballast
from dht.testbed.namespaces import spawn
from dht.testbed.page_cache import Unsynced

READY_DEADLINE = 15.0
STOP_DEADLINE = 10.0
CONTROL_DEADLINE = 10.0
FUSERMOUNT = "fusermount3"


class PowerLossUnavailable(RuntimeError):
    """This machine cannot mount the lazy filesystem; the message says why."""


def power_loss_unavailable() -> str | None:
    """None if `mount` can work here, else the reason in one line."""
    if not sys.platform.startswith("linux"):
        return f"the power-loss filesystem is FUSE on Linux, and this is {sys.platform}"
    if os.geteuid() != 0:
        return "mounting the power-loss filesystem needs root"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as exc:
        return f"cannot open /dev/fuse ({exc.strerror}): no FUSE in this kernel or container"
    if shutil.which(FUSERMOUNT) is None:
        return f"{FUSERMOUNT} is not on PATH: install Debian's fuse3 (`make fuse` does, as root)"
    try:
        import mfusepy  # noqa: F401  (loads libfuse3 too)
    except ImportError:
        return "the Python package mfusepy is missing: install dht's dependencies"
    except OSError as exc:  # mfusepy finds no libfuse
        return f"mfusepy cannot load libfuse3 ({exc}): install Debian's fuse3"
    return None


def control_path(mountpoint: Path) -> Path:
    """Where the filesystem of `mountpoint` answers `cut` and `unsynced`."""
    return mountpoint.with_name(mountpoint.name + ".control")


def mounted(mountpoint: Path) -> bool:
    """Whether something is mounted at `mountpoint`, from the mount table: a FUSE mount
    whose process died cannot be stat'ed (ENOTCONN), so os.path.ismount says no."""
    target = os.path.realpath(mountpoint)
    with open("/proc/self/mounts") as table:
        for line in table:
            fields = line.split()
            if len(fields) > 1 and _unescape(fields[1]) == target:
                return True
    return False


def _unescape(field: str) -> str:
    for escaped, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, char)
    return field


class PowerLossMount:
    """A running lazy filesystem: its process, mount point and control socket."""

    def __init__(
        self, backing: Path, mountpoint: Path, log_path: Path, capacity: int | None = None
    ) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.control = control_path(mountpoint)
        self.log_path = log_path
        self.capacity = capacity
        sized = [] if capacity is None else ["--capacity", str(capacity)]
        with open(log_path, "ab") as log:
            self.process = spawn(
                [sys.executable, "-m", __name__, "mount", str(backing), str(mountpoint), *sized],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def __enter__(self) -> PowerLossMount:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.unmount()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_DEADLINE
        while not (mounted(self.mountpoint) and self.control.exists()):
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the power-loss filesystem exited with code {self.process.returncode} "
                    f"before its mount was made: {self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the power-loss filesystem did not mount {self.mountpoint} within "
                    f"{READY_DEADLINE} s: {self.log_tail()}"
                )
            time.sleep(0.01)

    def power_cut(self) -> Unsynced:
        """Drops every write not fsynced; returns what was dropped. Meant for when the
        processes using the files are stopped (kill -9 them first), as after a real cut:
        one that keeps a file open may still read what the kernel cached of it."""
        return ask(self.control, "cut")

    def unsynced(self) -> Unsynced:
        """What a power cut now would drop."""
        return ask(self.control, "unsynced")

    def fill(self) -> int:
        """Takes every free byte of a mount with a capacity with a ballast file at its
        top; returns how many. Its data is never synced: it takes the filesystem's memory,
        not the backing disk's, and goes with `free()` (or a power cut)."""
        if self.capacity is None:
            raise ValueError(f"{self.mountpoint} has no capacity: it cannot be filled")
        return ballast.fill(self.mountpoint / ballast.BALLAST)

    def free(self) -> None:
        """Removes the ballast: the room it took is free again."""
        (self.mountpoint / ballast.BALLAST).unlink(missing_ok=True)

    def free_bytes(self) -> int:
        """The free space statfs reports at the mount."""
        found = os.statvfs(self.mountpoint)
        return found.f_bavail * found.f_frsize

    def unmount(self) -> None:
        """Takes the mount away and stops the process, whatever state they are in: a
        clean unmount first, a lazy one if the mount is busy or its process is gone."""
        if self.process.poll() is None:
            done = _fusermount("-u", self.mountpoint)
            if done.returncode != 0 and mounted(self.mountpoint):
                _fusermount("-u", "-z", self.mountpoint)
            try:
                self.process.wait(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        deadline = time.monotonic() + STOP_DEADLINE
        while mounted(self.mountpoint):
            # auto_unmount takes a killed filesystem's mount away by itself, soon after.
            if time.monotonic() > deadline:
                done = _fusermount("-u", "-z", self.mountpoint)
                if mounted(self.mountpoint):
                    raise RuntimeError(f"cannot unmount {self.mountpoint}: {done.stderr.strip()}")
            time.sleep(0.01)

    def log_tail(self, lines: int = 10) -> str:
        if not self.log_path.exists():
            return "(no log)"
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(tail) or "(it logged nothing)"


def ask(control: Path, command: str) -> Unsynced:
    """`cut` or `unsynced`, asked of the filesystem whose control socket is `control`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(CONTROL_DEADLINE)
        connection.connect(str(control))
        connection.sendall(f"{command}\n".encode())
        with connection.makefile("r") as stream:
            answer = stream.readline().split()
    if len(answer) != 3 or answer[0] != command:
        raise RuntimeError(f"the power-loss filesystem answered {' '.join(answer)!r}")
    return Unsynced(int(answer[1]), int(answer[2]))


def _fusermount(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FUSERMOUNT, *map(str, args)], capture_output=True, text=True, timeout=STOP_DEADLINE
    )


def mount(
    backing: Path, mountpoint: Path, log_path: Path | None = None, capacity: int | None = None
) -> PowerLossMount:
    """Serves `backing` at `mountpoint` (both made if missing) through the lazy
    filesystem, in a process of its own that dies with this one; returns once the mount
    is made. Raises PowerLossUnavailable where it cannot be used (module docstring).
    The filesystem logs to `log_path` (default: MOUNTPOINT.log, beside it); with a
    `capacity` it is a volume of that many bytes."""
    reason = power_loss_unavailable()
    if reason is not None:
        raise PowerLossUnavailable(reason)
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    handle = PowerLossMount(
        backing, mountpoint, log_path or mountpoint.with_name(mountpoint.name + ".log"), capacity
    )
    try:
        handle.wait_ready()
    except BaseException:
        handle.unmount()
        raise
    return handle


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m dht.testbed.power_loss",
        description="A filesystem that loses what was not fsynced when the power is cut.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "mount", help="serve BACKING at MOUNTPOINT (both made if missing) until unmounted"
    )
    serve.add_argument("backing", type=Path)
    serve.add_argument("mountpoint", type=Path)
    serve.add_argument(
        "--capacity",
        type=int,
        help="a volume of this many bytes: statfs says so, writes past it fail with ENOSPC "
        "(default: the backing directory's free space)",
    )
    for name, text in (("cut", "a power cut: drop every write not fsynced"),
                       ("unsynced", "what a power cut now would drop")):  # fmt: skip
        commands.add_parser(name, help=text).add_argument("mountpoint", type=Path)
    args = parser.parse_args(argv)
    if args.command == "mount":
        reason = power_loss_unavailable()
        if reason is not None:
            parser.exit(2, f"cannot mount: {reason}\n")
        from dht.testbed.lazy_filesystem import run

        args.backing.mkdir(parents=True, exist_ok=True)
        args.mountpoint.mkdir(parents=True, exist_ok=True)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        print(
            f"serving {args.backing} at {args.mountpoint}; a power cut: "
            f"python -m dht.testbed.power_loss cut {args.mountpoint}",
            flush=True,
        )
        run(args.backing, args.mountpoint, control_path(args.mountpoint), args.capacity)
        return
    try:
        unsynced = ask(control_path(args.mountpoint), args.command)
    except OSError as exc:
        parser.exit(
            1, f"no power-loss filesystem answers at {control_path(args.mountpoint)}: {exc}\n"
        )
    print(f"{args.command}: {unsynced.files} files, {unsynced.bytes} unsynced bytes")


if __name__ == "__main__":
    main()
