"""A stored version of one key: value, version, tombstone flag, expiry and copy count, and
its byte encoding.

Encoding, format 2 (written): one format byte (2), the version as 8 bytes big-endian, one
flags byte (bit 0 = tombstone), the number of copies the write asked for (`F` of
`replicas=A/F`, 1 byte, 0 = not known), the expiry as 8 bytes big-endian (milliseconds
since the epoch, 0 = never), then the value bytes to the end. The expiry is absolute and
travels inside the record, so every replica, hint, repair and anti-entropy exchange
agrees on when a record expires; the copy count tells anti-entropy which nodes are to
hold the record (dht/replication/anti_entropy.py).

Format 1 (read, never written): format byte 1, the version, the flags, then the value:
records stored before format 2 read as records that never expire, copies not known.

A tombstone has an empty value. An unknown or truncated record is an error, never
silently read as data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from dht.model.clock import version_ms

FORMAT_V1 = 1
FORMAT_V2 = 2
_HEADER_V1 = struct.Struct(">BQB")
_HEADER = struct.Struct(">BQBBQ")
_TOMBSTONE = 0x01
MAX_COPIES = 255


class CorruptRecord(ValueError):
    """The bytes are not a record this code can read."""


@dataclass(frozen=True, slots=True)
class Record:
    version: int
    tombstone: bool
    value: bytes = b""
    expires_at: int = 0  # wall-clock ms; 0 = never
    # F of the write, widened on each replica to the widest F of the versions it held
    # before (`wider_copies`); 0 = not known (a format-1 record): the whole cluster.
    copies: int = 0

    @classmethod
    def live(cls, version: int, value: bytes, expires_at: int = 0, copies: int = 0) -> Record:
        return cls(version, False, value, expires_at, copies)

    @classmethod
    def deleted(cls, version: int, copies: int = 0) -> Record:
        return cls(version, True, b"", 0, copies)

    def order(self) -> tuple[int, bool, bytes, int, int]:
        """Total order of records: version first; ties (two coordinators issuing the same
        version, or one version widened on one replica and not yet on another) are
        broken by tombstone, value, expiry, then the wider copy count, so every replica
        picks the same one."""
        return (self.version, self.tombstone, self.value, self.expires_at, _breadth(self.copies))

    def dead_since(self) -> int | None:
        """When the record stopped being readable (wall ms), or None while it may be:
        a tombstone from its version's time, an expiring record from its expiry."""
        if self.tombstone:
            return version_ms(self.version)
        return self.expires_at or None

    def live_at(self, now_ms: int) -> bool:
        """Whether a read at wall-clock `now_ms` sees a value: not deleted, not expired."""
        return not self.tombstone and (self.expires_at == 0 or now_ms < self.expires_at)

    def same_write(self, other: Record | None) -> bool:
        """Whether `other` is this very write, whatever F either says (a replica widens
        the F of what it stores, `wider_copies`)."""
        return other is not None and (
            self.version,
            self.tombstone,
            self.value,
            self.expires_at,
        ) == (other.version, other.tombstone, other.value, other.expires_at)

    def supersedes(self, other: Record | None) -> bool:
        """Whether this record should replace `other` under last-write-wins."""
        return other is None or self.order() > other.order()


def _breadth(copies: int) -> int:
    return copies or MAX_COPIES + 1  # 0: the whole cluster, wider than any F


def wider_copies(first: int, second: int) -> int:
    """The copy count of the two that names more nodes (replica sets for a smaller F are
    prefixes of those for a larger one; 0, the whole cluster, is the widest).

    A replica stores a newer record with the widest F of it and of the record it
    replaces: so a node that holds any version of a key is always among the replicas
    its record names, and anti-entropy compares the key with every node that may hold
    an older version (dht/replication/collector.py depends on it). A PUT at 3/3 then a
    PUT at 2/2 leaves the second value on three replicas, named as such."""
    return first if _breadth(first) >= _breadth(second) else second


def newest(records: list[Record | None]) -> Record | None:
    """The winning record among replica answers (None = the replica has no record)."""
    best: Record | None = None
    for record in records:
        if record is not None and record.supersedes(best):
            best = record
    return best


def encode_header(record: Record) -> bytes:
    """The encoding's first bytes; the value follows them (for writers that send the
    value without copying it behind the header)."""
    flags = _TOMBSTONE if record.tombstone else 0
    return _HEADER.pack(FORMAT_V2, record.version, flags, record.copies, record.expires_at)


def encode(record: Record) -> bytes:
    return encode_header(record) + record.value


def decode(data: bytes | memoryview) -> Record:
    """A record from its encoding; a memoryview (of a larger buffer) is read in place
    and only the value is copied out."""
    fmt = data[0] if len(data) else None
    if fmt == FORMAT_V2 and len(data) >= _HEADER.size:
        _, version, flags, copies, expires_at = _HEADER.unpack_from(data)
        header_size = _HEADER.size
    elif fmt == FORMAT_V1 and len(data) >= _HEADER_V1.size:
        _, version, flags = _HEADER_V1.unpack_from(data)
        copies, expires_at, header_size = 0, 0, _HEADER_V1.size
    elif fmt in (FORMAT_V1, FORMAT_V2):
        raise CorruptRecord(f"record of {len(data)} bytes is shorter than its header")
    else:
        raise CorruptRecord(f"unknown record format {fmt}")
    if flags & ~_TOMBSTONE:
        raise CorruptRecord(f"unknown record flags {flags:#x}")
    tombstone = bool(flags & _TOMBSTONE)
    value = bytes(data[header_size:])  # no copy when `data` is bytes: slicing made it
    if tombstone and value:
        raise CorruptRecord("tombstone with a value")
    if tombstone and expires_at:
        raise CorruptRecord("tombstone with an expiry")
    return Record(version, tombstone, value, expires_at, copies)
