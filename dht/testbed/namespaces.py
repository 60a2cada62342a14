"""Network namespaces that die with the process that made them (Linux, as root); for a
namespace that stands for a host of its own, with its mounts and host name too.

A namespace here has no name: a holder process (`unshare --net -- sleep infinity`) keeps
it, and it goes, with every veth end in it, once the holder and every process started in
it have exited. Every process this module starts gets PR_SET_PDEATHSIG=SIGKILL, so a
harness that is killed (`kill -9`, a crash) takes them, and so its namespaces, with it:
nothing is left to clean up, and nothing named can clash with another harness.

PDEATHSIG fires when the *thread* that started the child exits, not the process: start
processes from a thread that lives as long as they should (the main one), never from a
worker thread of a pool or a request handler.

Commands run in a namespace through `nsenter --net=/proc/<holder>/ns/net -- argv`;
nsenter execs the program, so the pid of its Popen is the program's own, and a signal
sent to it (SIGKILL, SIGSTOP) reaches the program.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_READY_DEADLINE = 5.0


def die_with_parent() -> Callable[[], None]:
    """A `preexec_fn` that makes the child get SIGKILL when the calling thread of this
    process exits. Made in the parent, it knows the parent's pid: a child whose parent
    died before prctl took effect exits at once rather than outlive it."""
    parent = os.getpid()

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(126)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def spawn(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Popen with `die_with_parent`, after any `preexec_fn` of the caller's."""
    own = die_with_parent()
    theirs = kwargs.pop("preexec_fn", None)

    def preexec() -> None:
        own()
        if theirs is not None:
            theirs()

    return subprocess.Popen(list(argv), preexec_fn=preexec, **kwargs)


def wait_for_holder(holder: subprocess.Popen[bytes], path: str, own: str, kind: str) -> None:
    """Until `holder` (started by `unshare`) is in a namespace of its own: its
    namespace link `path` no longer reads `own`, this process's. RuntimeError with
    unshare's own words if it exited, or after a few seconds."""
    deadline = time.monotonic() + _READY_DEADLINE
    while True:
        if holder.poll() is not None:
            assert holder.stderr is not None
            reason = holder.stderr.read().decode(errors="replace").strip()
            raise RuntimeError(f"cannot make a {kind} namespace: {reason}")
        try:
            if os.readlink(path) != own:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"a new {kind} namespace was not made in time")
        time.sleep(0.002)


def run_ip(commands: Sequence[str], prefix: Sequence[str] = ()) -> None:
    """`ip` commands in one process (`ip -batch -`), in the namespace `prefix` enters;
    RuntimeError with ip's own words if one fails."""
    done = subprocess.run(
        [*prefix, "ip", "-batch", "-"],
        input="\n".join(commands) + "\n",
        capture_output=True,
        text=True,
        timeout=10,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ip failed: {(done.stderr or done.stdout).strip()}")


class Namespace:
    """A network namespace of its own, held by a child process (see the module's
    docstring): `close` kills the holder, and the namespace goes once the processes
    started in it have exited too."""

    def __init__(self, also: Sequence[str] = ()) -> None:
        """`also`: other namespaces the holder has of its own, besides the network's:
        "mnt" (its mounts, private: what is mounted in it stays there) and "uts" (its
        host name), for a namespace that stands for a host of its own."""
        unknown = set(also) - {"mnt", "uts"}
        if unknown:
            raise ValueError(f"namespaces not made here: {sorted(unknown)}")
        self.kinds = ("net", *also)
        self._own = os.readlink("/proc/self/ns/net")
        options = {"net": "--net", "mnt": "--mount", "uts": "--uts"}
        self.holder = spawn(
            ["unshare", *(options[kind] for kind in self.kinds), "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.path = f"/proc/{self.holder.pid}/ns/net"

    def wait_until_ready(self) -> None:
        """Until the holder has left this namespace: before that, nsenter on its pid
        would enter ours, and an address meant for the new namespace would land here."""
        wait_for_holder(self.holder, self.path, self._own, "network")

    @property
    def prefix(self) -> list[str]:
        """What goes before argv to run it in this namespace."""
        entries = {"net": "--net", "mnt": "--mount", "uts": "--uts"}
        return [
            "nsenter",
            *(f"{entries[kind]}=/proc/{self.holder.pid}/ns/{kind}" for kind in self.kinds),
            "--",
        ]

    def ip(self, *commands: str) -> None:
        run_ip(commands, self.prefix)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        return spawn([*self.prefix, *argv], **kwargs)

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait()
        if self.holder.stderr is not None:
            self.holder.stderr.close()


def stop_processes(processes: Sequence[subprocess.Popen[bytes]], deadline: float = 5.0) -> None:
    """SIGTERM, then SIGKILL for those still there at the deadline. A stopped process
    (SIGSTOP) ignores SIGTERM until continued: it is continued after the signal."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
            process.send_signal(signal.SIGCONT)
    until = time.monotonic() + deadline
    for process in processes:
        try:
            process.wait(timeout=max(0.05, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("pid %d ignored SIGTERM for %.0f s; killing it", process.pid, deadline)
            process.kill()
            process.wait()
