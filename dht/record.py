"""A stored version of one key: value, version and tombstone flag, and its byte encoding.

Encoding (format 1): one format byte, the version as 8 bytes big-endian, one flags byte
(bit 0 = tombstone), then the value bytes to the end. A tombstone has an empty value.
The format byte lets the encoding evolve; an unknown or truncated record is an error,
never silently read as data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

FORMAT_V1 = 1
_HEADER = struct.Struct(">BQB")
_TOMBSTONE = 0x01


class CorruptRecord(ValueError):
    """The bytes are not a record this code can read."""


@dataclass(frozen=True, slots=True)
class Record:
    version: int
    tombstone: bool
    value: bytes = b""

    @classmethod
    def live(cls, version: int, value: bytes) -> Record:
        return cls(version, False, value)

    @classmethod
    def deleted(cls, version: int) -> Record:
        return cls(version, True, b"")

    def order(self) -> tuple[int, bool, bytes]:
        """Total order of records: version first; ties (two coordinators issuing the same
        version) are broken by tombstone then value, so every replica picks the same one."""
        return (self.version, self.tombstone, self.value)

    def supersedes(self, other: Record | None) -> bool:
        """Whether this record should replace `other` under last-write-wins."""
        return other is None or self.order() > other.order()


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
    return _HEADER.pack(FORMAT_V1, record.version, _TOMBSTONE if record.tombstone else 0)


def encode(record: Record) -> bytes:
    return encode_header(record) + record.value


def decode(data: bytes | memoryview) -> Record:
    """A record from its encoding; a memoryview (of a larger buffer) is read in place
    and only the value is copied out."""
    if len(data) < _HEADER.size:
        raise CorruptRecord(f"record of {len(data)} bytes is shorter than its header")
    fmt, version, flags = _HEADER.unpack_from(data)
    if fmt != FORMAT_V1:
        raise CorruptRecord(f"unknown record format {fmt}")
    if flags & ~_TOMBSTONE:
        raise CorruptRecord(f"unknown record flags {flags:#x}")
    tombstone = bool(flags & _TOMBSTONE)
    value = bytes(data[_HEADER.size :])  # no copy when `data` is bytes: slicing made it
    if tombstone and value:
        raise CorruptRecord("tombstone with a value")
    return Record(version, tombstone, value)
