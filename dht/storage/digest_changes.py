"""Where storage tells the changes to its digest index, each once it is on the disk, so
the Merkle trees of anti-entropy follow the disk without reading it again.

Storage sits below the repair loops that own the trees and must not know them; so the
node makes one `DigestChanges`, gives it to `Storage` and to `RepairLoops` when it
builds them, and the repair loops attach the trees of the current ring to it while the
membership is stable. Between two rings there are no trees to keep exact: a change
heard by no one is dropped, and the trees made at the next stable step load the digest
index as it is then (`Storage.landed_digests`)."""

from __future__ import annotations

from collections.abc import Callable

from dht.model.merkle import Digest

# Told (key, old, new) for each change of a record's digest entry: what was stored before
# it and what is after it, None for no entry (a record new, or removed).
ChangeListener = Callable[[bytes, Digest | None, Digest | None], None]


class DigestChanges:
    """One listener at most: a node keeps one set of trees at a time, and a step replaces
    them whole. Loop-only, like the landings that publish here, so trees attached with no
    await after `Storage.landed_digests` hear every change that snapshot misses, and
    only those."""

    __slots__ = ("_listener",)

    def __init__(self) -> None:
        self._listener: ChangeListener | None = None

    def listen(self, listener: ChangeListener | None) -> None:
        """`listener` hears every change from now on, in place of the one before; None
        detaches it (a membership step stops the trees)."""
        self._listener = listener

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def publish(self, key: bytes, old: Digest | None, new: Digest | None) -> None:
        """`key`'s digest entry went from `old` to `new` on the disk."""
        if self._listener is not None:
            self._listener(key, old, new)
