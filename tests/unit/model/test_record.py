"""Stored records: byte encoding and last-write-wins order (SPEC.md rules 8.3 and 10.1)."""

from __future__ import annotations

import itertools
import random
import struct

import pytest

from dht.conformance.rules import rule
from dht.model.clock import MAX_VERSION, version_at
from dht.model.record import (
    FORMAT_V1,
    FORMAT_V2,
    CorruptRecord,
    Record,
    decode,
    encode,
    newest,
    wider_copies,
)

VERSION = version_at(1_700_000_000_000, 3)
EXPIRY = 1_700_000_060_000
HEADER_SIZE = 19  # format byte, 8-byte version, flags, copies, 8-byte expiry
HEADER_V1_SIZE = 10  # format byte, 8-byte version, flags


def header(
    fmt: int = FORMAT_V2, version: int = VERSION, flags: int = 0, copies: int = 0, expiry: int = 0
) -> bytes:
    return struct.pack(">BQBBQ", fmt, version, flags, copies, expiry)


def header_v1(version: int = VERSION, flags: int = 0) -> bytes:
    return struct.pack(">BQB", FORMAT_V1, version, flags)


@pytest.mark.parametrize(
    "record",
    [
        Record.live(VERSION, b"value"),
        Record.live(VERSION, b""),
        Record.live(1, b"\x00\x01\xff\n"),
        Record.live(MAX_VERSION, random.Random(1).randbytes(4 * 1024 * 1024 + 17)),
        Record.deleted(VERSION),
        Record.deleted(MAX_VERSION),
        Record.live(VERSION, b"expiring", expires_at=EXPIRY, copies=3),
        Record.deleted(VERSION, copies=255),
    ],
    ids=[
        "live",
        "empty-value",
        "binary",
        "large",
        "tombstone",
        "tombstone-max-version",
        "expiring",
        "tombstone-with-copies",
    ],
)
def test_encode_then_decode_gives_back_the_same_record(record: Record) -> None:
    data = encode(record)
    assert len(data) == HEADER_SIZE + len(record.value)
    assert decode(data) == record


@rule("10.1", "11.1")
def test_the_encoding_is_format_byte_version_flags_copies_expiry_value() -> None:
    assert encode(Record.live(VERSION, b"abc")) == header() + b"abc"
    assert encode(Record.deleted(VERSION)) == header(flags=0x01)
    assert encode(Record.live(VERSION, b"v", EXPIRY, 2)) == header(copies=2, expiry=EXPIRY) + b"v"


@rule("10.1")
def test_a_format_1_record_reads_as_one_that_never_expires_copies_not_known() -> None:
    assert decode(header_v1() + b"abc") == Record(VERSION, False, b"abc", 0, 0)
    assert decode(header_v1(flags=0x01)) == Record.deleted(VERSION)
    for length in range(HEADER_V1_SIZE):
        with pytest.raises(CorruptRecord):
            decode(header_v1()[:length])


def test_a_tombstone_with_an_expiry_is_a_corrupt_record() -> None:
    with pytest.raises(CorruptRecord):
        decode(header(flags=0x01, expiry=EXPIRY))


def test_a_record_is_live_until_its_expiry_and_a_tombstone_never() -> None:
    assert Record.live(VERSION, b"v").live_at(EXPIRY * 10)
    expiring = Record.live(VERSION, b"v", expires_at=EXPIRY)
    assert expiring.live_at(EXPIRY - 1)
    assert not expiring.live_at(EXPIRY)
    assert not Record.deleted(VERSION).live_at(0)


@pytest.mark.parametrize("fmt", [0, 3, 0x7F, 0xFF])
def test_an_unknown_format_byte_is_a_corrupt_record(fmt: int) -> None:
    with pytest.raises(CorruptRecord):
        decode(header(fmt=fmt) + b"value")


@pytest.mark.parametrize("length", range(HEADER_SIZE))
def test_a_truncated_header_is_a_corrupt_record(length: int) -> None:
    with pytest.raises(CorruptRecord):
        decode(header()[:length])


@pytest.mark.parametrize("flags", [0x02, 0x03, 0x80, 0xFF])
def test_unknown_flags_are_a_corrupt_record(flags: int) -> None:
    with pytest.raises(CorruptRecord):
        decode(header(flags=flags) + b"value")


def test_a_tombstone_with_a_value_is_a_corrupt_record() -> None:
    with pytest.raises(CorruptRecord):
        decode(header(flags=0x01) + b"x")


def test_corrupt_record_is_a_value_error() -> None:
    assert issubclass(CorruptRecord, ValueError)


def test_the_higher_version_wins_whatever_it_holds() -> None:
    older = Record.live(VERSION, b"zzzz")
    for newer in (Record.live(VERSION + 1, b""), Record.deleted(VERSION + 1)):
        assert newer.supersedes(older)
        assert not older.supersedes(newer)
        assert newest([older, newer]) == newer
        assert newest([newer, older]) == newer
    assert Record.live(VERSION + 1, b"a").supersedes(Record.deleted(VERSION))


def test_anything_supersedes_no_record() -> None:
    assert Record.live(1, b"").supersedes(None)
    assert Record.deleted(1).supersedes(None)


@rule("8.3")
def test_equal_versions_are_ordered_tombstone_first_then_larger_value() -> None:
    ranked = [  # best first
        Record.deleted(VERSION),
        Record.live(VERSION, b"b"),
        Record.live(VERSION, b"abc"),
        Record.live(VERSION, b"a"),
        Record.live(VERSION, b""),
    ]
    for better, worse in itertools.combinations(ranked, 2):
        assert better.supersedes(worse), (better, worse)
        assert not worse.supersedes(better), (better, worse)
    for order in itertools.permutations(ranked):
        assert newest([None, *order]) == ranked[0]
    for order in itertools.permutations(ranked[1:]):
        assert newest(list(order)) == ranked[1]


def test_newest_of_no_answers_is_none() -> None:
    assert newest([]) is None
    assert newest([None]) is None
    assert newest([None, None]) is None


def test_newest_skips_replicas_without_a_record() -> None:
    record = Record.live(VERSION, b"v")
    assert newest([None, record, None]) == record


def test_a_repeated_delivery_does_not_supersede_itself() -> None:
    for record in (Record.live(VERSION, b"v"), Record.live(VERSION, b""), Record.deleted(VERSION)):
        copy = decode(encode(record))
        assert not record.supersedes(record)
        assert not record.supersedes(copy)
        assert not copy.supersedes(record)
        assert newest([record, copy]) == record


def test_copy_counts_widen_and_the_wider_wins_a_tie() -> None:
    assert wider_copies(2, 3) == 3 and wider_copies(3, 2) == 3
    assert wider_copies(0, 5) == 0 and wider_copies(255, 0) == 0  # 0: the whole cluster
    narrow, wide, whole = (Record.deleted(7, copies) for copies in (2, 3, 0))
    assert wide.supersedes(narrow) and not narrow.supersedes(wide)
    assert whole.supersedes(wide) and not wide.supersedes(whole)
