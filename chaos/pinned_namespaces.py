"""Network namespaces held open by this test while it asks what still runs in them.

A namespace is known in /proc by its inode (`net:[4026532...]`), and the kernel gives a
freed namespace's inode to the next one made: once a test bed's namespaces are gone,
another test worker's new test bed can hold the same inodes, and its processes would
look like leftovers of this one (CI saw four such). An open file on a namespace keeps
it, and its inode, from being freed, so while pinned its inode names it alone."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType


class PinnedNamespaces:
    """The network namespaces of `pids`, other than this process's own, each kept by an
    open file until `close` (or the end of a `with` block)."""

    def __init__(self, pids: Iterable[int]) -> None:
        own = os.readlink("/proc/self/ns/net")
        self._files: dict[str, int] = {}
        try:
            for pid in pids:
                try:
                    descriptor = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
                except OSError:
                    continue  # the process has exited: it holds nothing to look at
                name = os.readlink(f"/proc/self/fd/{descriptor}")
                if name == own or name in self._files:
                    os.close(descriptor)
                else:
                    self._files[name] = descriptor
        except BaseException:
            self.close()
            raise

    @property
    def names(self) -> set[str]:
        return set(self._files)

    def occupants(self) -> list[int]:
        """Every process now in one of the pinned namespaces."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.readlink(entry / "ns" / "net") in self._files:
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def close(self) -> None:
        for descriptor in self._files.values():
            os.close(descriptor)
        self._files = {}

    def __enter__(self) -> PinnedNamespaces:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
