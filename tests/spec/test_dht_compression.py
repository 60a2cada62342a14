"""SPEC.md rule 10.1: `--compression` says how LevelDB stores its new blocks (none, the
default, or Snappy), and a data folder written either way opens and serves either way.

Real nodes on real LevelDB: the same compressible values written through each setting
take measurably different room in LevelDB's tables, and a folder written with one
setting is read back whole, and written on, by a node restarted with the other.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.fixtures import ClusterFactory
from dht.conformance.http_client import expect
from dht.conformance.launcher import Node
from dht.conformance.rules import rule

pytestmark = pytest.mark.dht

# 6 MiB of values that compress well: more than LevelDB's 4 MiB memtable, so at least
# one table is written (compression applies to tables, not to the log).
VALUE = b"compressible " * 600  # 7.8 KB
KEYS = [f"compress-{index:04d}" for index in range(800)]


def table_bytes(node: Node) -> int:
    """The size of LevelDB's tables in the node's data folder."""
    return sum(path.stat().st_size for path in Path(node.data_dir).rglob("*.ldb"))


def write_all(node: Node, keys: list[str], value: bytes) -> None:
    for key in keys:
        expect(node.put(key, value), 201, context=key)


def restarted_with(node: Node, compression: str) -> None:
    node.stop()
    at = node.extra_args.index("--compression")
    node.extra_args[at : at + 2] = ["--compression", compression]
    node.start()


@rule("10.1")
def test_snappy_stores_compressible_values_in_less_room_than_none(
    start_cluster: ClusterFactory,
) -> None:
    sizes = {}
    for compression in ("none", "snappy"):
        node = start_cluster(1, ["--compression", compression])[0]
        write_all(node, KEYS, VALUE)
        node.stop()  # LevelDB's log is replayed into a table at the next open
        node.start()
        sizes[compression] = table_bytes(node)
    written = len(KEYS) * len(VALUE)
    print(f"\ntables after {written:,} bytes of values: {sizes}")
    assert sizes["none"] > written // 2, sizes
    assert sizes["snappy"] < sizes["none"] // 4, sizes


@rule("10.1")
def test_a_folder_written_with_one_compression_serves_with_the_other(
    start_cluster: ClusterFactory,
) -> None:
    node = start_cluster(1, ["--compression", "snappy"])[0]
    first, second = KEYS[:400], KEYS[400:]
    write_all(node, first, VALUE)
    restarted_with(node, "none")
    for key in first:
        expect(node.get(key), 200, VALUE, context=key)
    write_all(node, second, VALUE[::-1])
    restarted_with(node, "snappy")
    for key in first:
        expect(node.get(key), 200, VALUE, context=key)
    for key in second:
        expect(node.get(key), 200, VALUE[::-1], context=key)
