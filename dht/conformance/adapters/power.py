"""Power cuts of an adapter's members: each member's data folder served through the
lazy filesystem (`dht.testbed.power_loss`), which keeps in memory what its processes
wrote and did not fsync, and a cut drops that, as a machine that loses its power loses
its page cache. The processes of the member are killed with SIGKILL first, all at once
(the adapter does that: it knows them), so none of them sees its own unsynced writes
vanish while it runs.

An adapter holds one and mounts nothing until a run asks for power faults (`prepare`):
then it `mount`s every member's folder before the member starts (each on a mount of its
own, its files kept in a backing folder beside it) and `unmount`s them once every
process is stopped, whatever happened; `unmount` is safe to call when nothing was
mounted. A member's logs stay outside its mount: a cut takes only its data.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dht.testbed.page_cache import Unsynced
from dht.testbed.power_loss import PowerLossMount, mount, power_loss_unavailable


class Power:
    """The mounts of the members whose data folders are `folders` (member i's is
    `folders[i]`)."""

    def __init__(self, folders: Sequence[Path]) -> None:
        self.folders = list(folders)
        self.enabled = False
        self._mounts: list[PowerLossMount | None] = [None] * len(self.folders)

    def prepare(self) -> str | None:
        """Why this machine cannot cut the members' power, or None: it will."""
        reason = power_loss_unavailable()
        self.enabled = reason is None
        return reason

    def mount(self) -> None:
        """Every member's folder a mount of the lazy filesystem of its own, once the run
        asked for power faults; to be called before any member starts."""
        if not self.enabled:
            return
        for index, folder in enumerate(self.folders):
            if self._mounts[index] is None:
                backing = folder.with_name(f"{folder.name}-backing")
                log = folder.with_name(f"{folder.name}-filesystem.log")
                self._mounts[index] = mount(backing, folder, log)

    def cut(self, index: int) -> Unsynced:
        """What member `index` wrote and did not fsync dropped, and said: its processes
        must be killed first."""
        mounted = self._mounts[index]
        if mounted is None:
            raise RuntimeError("no power cut before `prepare` and `mount`")
        return mounted.power_cut()

    def unmount(self) -> None:
        """Every mount taken away, those that exist: each is tried, then the first
        failure raised."""
        failures: list[BaseException] = []
        for index, mounted in enumerate(self._mounts):
            if mounted is None:
                continue
            try:
                mounted.unmount()
            except (OSError, RuntimeError) as error:
                failures.append(error)
            self._mounts[index] = None
        if failures:
            raise failures[0]
