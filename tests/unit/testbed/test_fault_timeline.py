"""The cockpit's fault timeline (dht/testbed/fault_timeline.py) and how the link changes
the page makes through Toxiproxy's API land on it (cockpit_faults.note_link_change)."""

from __future__ import annotations

import json

from dht.history.run import FaultWindow
from dht.testbed.cockpit_faults import note_link_change
from dht.testbed.fault_timeline import FaultTimeline


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def timeline() -> tuple[FaultTimeline, Clock]:
    clock = Clock()
    return FaultTimeline(clock, wall=lambda: clock.now + 1_000_000.0), clock


def test_a_fault_lasts_from_its_begin_to_its_heal_and_a_second_begin_changes_nothing() -> None:
    faults, clock = timeline()
    faults.begin("process:node2", "kill -9 node2", "process")
    clock.now = 103.0
    faults.begin("process:node2", "node2 exited (code -9)", "process")  # the same fault
    assert faults.is_open("process:node2")
    clock.now = 105.0
    faults.end("process:node2")
    faults.instant("restart:node2", "restart node2", "process", 0.5)
    assert not faults.is_open("process:node2")
    assert [(e["label"], e["seconds"], e["ongoing"]) for e in faults.as_json()] == [
        ("restart node2", 0.5, False),
        ("kill -9 node2", 5.0, False),
    ]
    assert faults.as_json()[1]["started"] == 1_000_100.0


def test_a_recording_gets_the_faults_that_overlap_it_a_lasting_one_cut_at_its_end() -> None:
    faults, clock = timeline()
    faults.begin("a", "before", "link")
    clock.now = 101.0
    faults.end("a")
    clock.now = 110.0
    faults.begin("b", "during", "link")
    clock.now = 115.0
    faults.end("b")
    faults.begin("c", "still on", "process")
    clock.now = 130.0
    assert faults.windows(105.0, 120.0) == [
        FaultWindow("during", 110.0, 115.0),
        FaultWindow("still on", 115.0, 120.0),
    ]


def test_the_timeline_keeps_its_latest_events_only() -> None:
    faults = FaultTimeline(kept=3)
    for index in range(5):
        faults.instant(f"k{index}", f"fault {index}", "link", 0.1)
    assert [event.label for event in faults.events()] == ["fault 2", "fault 3", "fault 4"]


def test_link_changes_through_toxiproxy_begin_and_end_faults_and_a_reset_ends_them_all() -> None:
    faults, clock = timeline()
    note_link_change(faults, "POST", "/proxies/node1-to-node2", b'{"enabled": false}')
    toxic = {"name": "latency_downstream", "type": "latency", "attributes": {"latency": 500}}
    note_link_change(faults, "POST", "/proxies/node2-to-node3/toxics", json.dumps(toxic).encode())
    note_link_change(faults, "POST", "/proxies/node3-to-node1/toxics", b'{"type": "timeout"}')
    labels = {event.label: event.ended for event in faults.events()}
    assert labels == {
        "cut node1-to-node2": None,
        "slow node2-to-node3 by 500 ms": None,
        "timeout on node3-to-node1": None,
    }
    clock.now = 102.0
    note_link_change(faults, "POST", "/proxies/node1-to-node2", b'{"enabled": true}')
    note_link_change(faults, "DELETE", "/proxies/node2-to-node3/toxics/latency_downstream", b"")
    assert [event.ended for event in faults.events()] == [102.0, 102.0, None]
    clock.now = 104.0
    note_link_change(faults, "POST", "/reset", b"")
    assert [event.ended for event in faults.events()] == [102.0, 102.0, 104.0]
    note_link_change(faults, "POST", "/proxies/x", b"not json")  # nothing, no error
    assert len(faults.events()) == 3


def test_a_full_timeline_forgets_an_ended_fault_never_a_lasting_one() -> None:
    faults = FaultTimeline(kept=2)
    faults.begin("cut", "cut node1-to-node2", "link")
    faults.instant("r1", "restart node1", "process", 0.1)
    faults.instant("r2", "restart node2", "process", 0.1)
    assert [event.label for event in faults.events()] == ["cut node1-to-node2", "restart node2"]
    assert faults.is_open("cut")
