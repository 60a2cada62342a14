"""The pure parts of the anti-entropy benchmark (bench.anti_entropy and its modules):
reading /v0/status, the targets and the report (no node is started)."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

import pytest

from bench.anti_entropy_cluster import compaction_starts, log_problems
from bench.anti_entropy_load import mixed_lua, mixed_targets
from bench.anti_entropy_report import Divergence, markdown, relative_change
from bench.exchange_status import (
    busiest,
    copied,
    expected_differing_leaves,
    in_sync,
    landed,
)
from bench.machine_cpu import foreign_cores

A, B, C = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"


def stats(
    exchanges: int = 0,
    sent: int = 0,
    received: int = 0,
    compared: int = 0,
    differing: int = 0,
) -> dict[str, Any]:
    return {
        "anti_entropy": {
            "exchanges": exchanges,
            "last_completed": None,
            "last_started_ms": 0,
            "leaves_compared": compared,
            "leaves_differing": differing,
            "records_sent": sent,
            "records_received": received,
            "last_error": None,
        }
    }


def cluster(**pairs: dict[str, Any]) -> dict[str, Any]:
    """Statuses of A, B, C; `pairs` overrides one (node, peer) block: `ab=stats(...)`."""
    urls = {"a": A, "b": B, "c": C}
    result: dict[str, Any] = {}
    for name, url in urls.items():
        peers = {
            other_url: pairs.get(name + other, stats())
            for other, other_url in urls.items()
            if other != name
        }
        result[url] = {"peers": peers}
    return result


def test_landed_counts_what_the_target_pulled_and_what_its_peers_pushed() -> None:
    statuses = cluster(
        ca=stats(received=5),
        cb=stats(received=7),
        ac=stats(sent=100),
        bc=stats(sent=20),
        ab=stats(sent=1000),  # between the others: not into C
    )
    statuses[C]["peers"][A]["anti_entropy"]["records_sent"] = 3  # C pushing out: not in
    assert landed(statuses, C) == 5 + 7 + 100 + 20


def test_copied_sums_every_pair() -> None:
    statuses = cluster(ab=stats(sent=2, received=3), cb=stats(sent=5), ba=stats(received=7))
    assert copied(statuses) == (7, 10)


def test_in_sync_needs_a_new_clean_exchange_on_every_pair() -> None:
    before = cluster(ab=stats(exchanges=4), ba=stats(exchanges=4))
    everyone = {p: stats(exchanges=5) for p in ("ab", "ac", "ba", "bc", "ca", "cb")}
    assert in_sync(before, cluster(**everyone))
    assert not in_sync(before, cluster(**(everyone | {"ab": stats(exchanges=4)})))
    assert not in_sync(before, cluster(**(everyone | {"cb": stats(exchanges=5, differing=1)})))
    # A node restarted since `before` (its counters back at zero) needs only one.
    restarted = {p: stats(exchanges=1) for p in ("ac", "bc", "ca", "cb")}
    assert in_sync({}, cluster(**restarted, ab=stats(exchanges=1), ba=stats(exchanges=1)))


def test_busiest_keeps_the_exchange_with_the_most_differing_leaves_since_the_baseline() -> None:
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    baseline = {(B, C): 10}
    busiest(seen, cluster(bc=stats(exchanges=10, compared=900, differing=800)), baseline)
    assert seen == {}  # an exchange from before the baseline
    busiest(seen, cluster(bc=stats(exchanges=11, compared=178, differing=97)), baseline)
    busiest(seen, cluster(bc=stats(exchanges=12, compared=0, differing=0)), baseline)
    assert seen[B, C] == (178, 97)
    assert (A, B) not in seen  # no exchange completed at all


def test_expected_differing_leaves() -> None:
    assert expected_differing_leaves(0) == 0
    assert expected_differing_leaves(1) == pytest.approx(1)
    assert expected_differing_leaves(100) == pytest.approx(95.3, abs=0.1)
    assert expected_differing_leaves(10**6) == pytest.approx(1024)


def test_mixed_targets_alternate_get_and_put_over_the_loaded_keys() -> None:
    lines = [json.loads(line) for line in mixed_targets(A, 50, 6, b"x" * 3, seed=2)]
    assert [t["method"] for t in lines] == ["GET", "PUT"] * 3
    for target in lines:
        key = target["url"].split("id=")[1]
        assert target["url"].startswith(A + "/v0/entity?id=key")
        assert 0 <= int(key.removeprefix("key")) < 50 and len(key) == 13
    assert base64.b64decode(lines[1]["body"]) == b"xxx"


def test_mixed_lua_names_the_keys_as_the_loader_does() -> None:
    script = mixed_lua(1000, 100)
    assert 'string.format("/v0/entity?id=key%010d", math.random(0, 999))' in script
    assert 'string.rep("v", 100)' in script


def test_log_problems_leaves_out_the_start_warning() -> None:
    lines = [
        "12:00 WARNING dht: no --secret: this node takes replica writes",
        "12:00 INFO dht: serving",
        "12:01 WARNING dht.transport.peers: circuit to http://x opened",
        "12:02 ERROR dht.replication.anti_entropy: anti-entropy with x failed",
        "Traceback (most recent call last):",
    ]
    assert log_problems(lines) == lines[2:]


def test_foreign_cores_and_relative_change() -> None:
    assert foreign_cores(busy=3.0, ours=1.0, seconds=2.0) == 1.0
    assert foreign_cores(busy=1.0, ours=1.02, seconds=2.0) == 0.0
    assert relative_change(10.0, 11.5) == pytest.approx(0.15)


def test_markdown_shows_only_the_figures_that_ran() -> None:
    divergence = Divergence(10_000, 100, 1.0, 100, 0, {(B, C): (178, 97)}, True)
    text = markdown(10_000, None, divergence, None, None)
    assert text.splitlines()[:2] == ["| figure | result |", "| --- | --- |"]
    assert len(text.splitlines()) == 3
    assert "| records exchanged, 100 keys changed (1%) | 100 (1.00% of the keys)" in text
    assert "178 compared, 97 differing of 1,024" in text


def test_compaction_starts_reads_leveldb_log_lines() -> None:
    log = [
        "2026/11/23-13:36:52.855273 139736693864128 Level-0 table #36: started",
        "2026/11/23-13:36:53.057123 139736693864128 Compacting 1@1 + 7@2 files",
        "2026/11/23-13:36:54.097000 139736693864128 Compacted 1@1 + 7@2 files => 13669037 bytes",
        "garbage Compacting",
    ]
    assert compaction_starts(log) == [datetime.datetime(2026, 11, 23, 13, 36, 53, 57123)]
