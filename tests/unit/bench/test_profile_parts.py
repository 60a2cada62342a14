"""bench.profile_parts gives each py-spy sample to the part of dht it ran in."""

from __future__ import annotations

from bench.profile_parts import PARTS, samples_by_part, table

LOOP = "thread (101): MainThread;run_node (dht/node.py:346);run (uvloop/__init__.py:82)"
FOLDED = [
    f"{LOOP};serve (dht/web/lean_http.py:140);put (dht/coordination/coordinator.py:130);"
    "write (dht/storage/store.py:300) 30",
    f"{LOOP};data_received (aiohttp/web_protocol.py:400) 20",
    f"{LOOP};put (dht/coordination/coordinator.py:130);call (dht/transport/peers.py:200) 25",
    f"{LOOP} 15",
    "thread (102): leveldb-writer;_bootstrap (threading.py:1002);"
    "_write_batch (dht/storage/store.py:410) 10",
    "not a sample line",
]


def test_each_sample_goes_to_the_innermost_part_it_ran_in_and_the_writer_thread_apart() -> None:
    counts = samples_by_part(FOLDED)
    assert counts == {
        "storage (loop side)": 30,
        "HTTP edge (aiohttp)": 20,
        "replica channel": 25,
        "event loop and the rest": 15,
        "group commit (writer thread)": 10,
    }


def test_the_table_turns_shares_into_microseconds_per_request() -> None:
    lines = table(samples_by_part(FOLDED), cpu_us_per_request=200.0).splitlines()
    assert len(lines) == 2 + len(PARTS) + 1
    assert "| storage (loop side) | 30 | 30.0% | 60.0 |" in lines
    assert lines[-1] == "| total | 100 | 100% | 200.0 |"
