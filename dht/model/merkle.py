"""Hash trees over record digests, one per peer, for anti-entropy (pure: no I/O).

Every stored record has a digest (64 bits of its key, version, flags, copies, expiry and
value). Keys fall into 2**LEAF_BITS leaves by their ring hash. For each peer, a node keeps
the XOR of the digests of the records in each leaf that both it and that peer are to hold:
the record's replica set for the copies it was written with (`F`, or the cluster size
for a record that does not say) includes them both. XOR makes the leaves incremental: a
write takes the old digest out and puts the new one in, in O(1) per peer, and the order
in which writes land does not matter. Inner nodes hash their two children (BLAKE2b), so
two trees agree at the root only if every leaf agrees.

Two nodes compare trees top-down and descend only into subtrees that differ: an
exchange costs O(differences x LEAF_BITS) hashes on the wire, then one key list per
differing leaf, then one record per differing key.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import mmh3

from dht.model.record import Record, encode_header
from dht.model.ring import Ring, key_hash

LEAF_BITS = 10
LEAVES = 1 << LEAF_BITS
_ENTRY = struct.Struct(">QQBQ")
_ENTRY_WITHOUT_ARRIVAL = struct.Struct(">QQB")


def leaf_of(key: bytes) -> int:
    """The leaf of a key: the top LEAF_BITS of its ring hash (as unsigned 64 bits)."""
    return (key_hash(key) & 0xFFFF_FFFF_FFFF_FFFF) >> (64 - LEAF_BITS)


def record_digest(key: bytes, record: Record) -> int:
    """64 bits that differ when any part of the record differs (the value through its
    own 128-bit hash, so a large value is hashed once, not copied)."""
    head = encode_header(record) + mmh3.hash_bytes(record.value) + key
    return int(mmh3.hash64(head, signed=False)[0])


@dataclass(frozen=True, slots=True)
class Digest:
    """What the digest index keeps of one stored record: `arrived_ms` is this node's
    wall clock when the record was stored here (0: not known), which tombstone
    collection goes by (dht/replication/collector.py)."""

    version: int
    digest: int
    copies: int
    arrived_ms: int = 0


def holders(ring: Ring, key: bytes, copies: int) -> list[str]:
    """The nodes that are to hold a record written with `copies` (0: the whole cluster,
    the default `F` of a write that did not say)."""
    return ring.replicas_for(key, copies or len(ring))


class MerkleTrees:
    """This node's tree for each peer, kept current by `change` on every write."""

    def __init__(self, ring: Ring, self_url: str) -> None:
        self._ring = ring
        self._self_url = self_url
        self.leaves: dict[str, list[int]] = {
            url: [0] * LEAVES for url in ring.nodes if url != self_url
        }
        self._levels: dict[str, list[list[bytes]]] = {}  # cached inner hashes, per peer

    def change(self, key: bytes, old: Digest | None, new: Digest | None) -> None:
        """A record of `key` went from `old` to `new` (None: absent)."""
        leaf = leaf_of(key)
        for entry in (old, new):
            if entry is None:
                continue
            for url in self.sharing(key, entry.copies):
                self.leaves[url][leaf] ^= entry.digest
                self._levels.pop(url, None)

    def sharing(self, key: bytes, copies: int) -> list[str]:
        """The peers that hold a record of `key` together with this node, if any."""
        nodes = holders(self._ring, key, copies)
        if self._self_url not in nodes:
            return []
        return [url for url in nodes if url != self._self_url]

    def load(self, entries: Iterable[tuple[bytes, Digest]]) -> int:
        """Adds every stored record's digest (at start); returns how many were read."""
        count = 0
        for key, entry in entries:
            self.change(key, None, entry)
            count += 1
        return count

    def hashes(self, peer: str, level: int, nodes: Iterable[int]) -> list[bytes]:
        """The hashes of `nodes` at `level` (0: the root, LEAF_BITS: the leaves) of the
        tree shared with `peer`."""
        levels = self._levels.get(peer)
        if levels is None:
            levels = self._levels[peer] = build_levels(self.leaves[peer])
        return [levels[level][node] for node in nodes]


def build_levels(leaves: list[int]) -> list[list[bytes]]:
    """Every level of the tree, root first: a leaf's hash is its XOR as 8 bytes; an
    inner node's is BLAKE2b-8 over its children's."""
    level = [leaf.to_bytes(8, "big") for leaf in leaves]
    levels = [level]
    while len(level) > 1:
        level = [
            hashlib.blake2b(level[i] + level[i + 1], digest_size=8).digest()
            for i in range(0, len(level), 2)
        ]
        levels.append(level)
    levels.reverse()
    return levels


def differing_children(level: int, nodes: list[int]) -> list[int]:
    """The nodes of `level + 1` under `nodes` of `level`."""
    return [child for node in nodes for child in (2 * node, 2 * node + 1)]


def pack_digest(entry: Digest) -> bytes:
    return _ENTRY.pack(entry.version, entry.digest, entry.copies, entry.arrived_ms)


def unpack_digest(data: bytes) -> Digest:
    """An entry of 25 bytes, or of 17 (from before arrival times: not known)."""
    if len(data) == _ENTRY_WITHOUT_ARRIVAL.size:
        return Digest(*_ENTRY_WITHOUT_ARRIVAL.unpack(data))
    return Digest(*_ENTRY.unpack(data))
