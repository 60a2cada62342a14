"""A volume of fixed size under a node's data folder, that the test bed can fill and free
from outside (Linux, as root): a tmpfs mounted in a mount namespace of its own, so the
node (started through `prefix`) sees it at its folder and nothing else on the machine
does, and nothing of it outlives the harness.

    disk = SmallDisk(folder, size)   # the namespace and its tmpfs at `folder`
    node.prefix = disk.prefix()      # the node runs in that namespace
    disk.fill()                      # a ballast file takes every free byte
    disk.free()                      # the ballast goes
    disk.close()                     # the namespace, the volume and its data go

The namespace is held by a child process (`unshare --mount -- sleep infinity`) that dies
with the harness (dht.testbed.namespaces), so a node restarted through `prefix` finds
its data again, and a harness killed takes the volume with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from dht.testbed.ballast import BALLAST
from dht.testbed.namespaces import spawn, wait_for_holder

_COMMAND_DEADLINE = 30.0


def small_disk_unavailable() -> str | None:
    """None if a SmallDisk can be made here, else the reason in one line."""
    if not sys.platform.startswith("linux"):
        return f"a volume in a mount namespace needs Linux, and this is {sys.platform}"
    if os.geteuid() != 0:
        return "mounting a volume in a mount namespace needs root"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (util-linux)"
    return None


class SmallDisk:
    """A tmpfs of `size` bytes at `folder`, in a mount namespace of its own."""

    def __init__(self, folder: Path, size: int) -> None:
        self.folder = folder
        self.size = size
        folder.mkdir(parents=True, exist_ok=True)
        self._own = os.readlink("/proc/self/ns/mnt")
        self.holder = spawn(
            ["unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.path = f"/proc/{self.holder.pid}/ns/mnt"
        try:
            # Before the holder is in its namespace, nsenter would enter ours, and
            # the mount would land on the machine's.
            wait_for_holder(self.holder, self.path, self._own, "mount")
            self._run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder))
        except BaseException:
            self.close()
            raise

    def prefix(self, workdir: Path | None = None) -> list[str]:
        """What goes before a command to run it with this volume at `folder`, in
        `workdir` (entering a mount namespace starts a process at its root, `/`, so a
        relative path in the command would mean something else)."""
        return ["nsenter", f"--mount={self.path}", f"--wd={workdir or Path.cwd()}", "--"]

    def fill(self) -> int:
        """Takes every free byte of the volume with a ballast file; returns how many."""
        done = self._run(sys.executable, "-m", "dht.testbed.ballast", str(self.folder / BALLAST))
        return int(done.stdout.split()[-1])

    def free(self) -> None:
        """Removes the ballast: the space it took is free again."""
        self._run("rm", "-f", str(self.folder / BALLAST))

    def free_bytes(self) -> int:
        done = self._run("stat", "--file-system", "--format", "%a %S", str(self.folder))
        blocks, block_size = map(int, done.stdout.split())
        return blocks * block_size

    def close(self) -> None:
        """Kills the holder: the namespace, and the volume with what is on it, go once
        the processes started in it have exited too."""
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait()
        if self.holder.stderr is not None:
            self.holder.stderr.close()

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.prefix(), *argv], capture_output=True, text=True, timeout=_COMMAND_DEADLINE
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} in the volume's namespace failed: {done.stderr.strip()}")
        return done
