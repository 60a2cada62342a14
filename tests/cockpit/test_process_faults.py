"""The cockpit's process faults, fault timeline and recorded experiments (SPEC.md rule
6.7), on a real `python -m dht cluster` and in headless Chromium: a button kills, pauses,
resumes, restarts or wipes a node's process through the cluster command, the page shows
it at once, and the timeline says what was done, when and for how long."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from dht.conformance.http_client import entity_url, request
from dht.conformance.rules import rule
from tests.cockpit.test_dashboard import (
    RunningCluster,
    attribute,
    click,
    running_cluster,
    save_screenshot,
    text_of,
    wait_until,
)

SCREENSHOT = Path(__file__).resolve().parents[2] / "artifacts" / "cockpit-process-faults.png"
ACTION_DEADLINE = 45.0  # a restart waits until the node serves, on a 2-core machine
KEYS = [f"faults-{index:02d}" for index in range(10)]


def node_row(name: str) -> str:
    return f'#nodes-body tr[data-node="{name}"]'


def wait_for_process(driver: Any, name: str, state: str) -> None:
    wait_until(
        driver,
        lambda d: (
            attribute(d, node_row(name), "data-process") == state
            and attribute(d, node_row(name), "data-state") == ("up" if state != "down" else "down")
        ),
        f"{name}'s process {state}",
        ACTION_DEADLINE,
    )


def press(driver: Any, action: str, name: str) -> None:
    """Presses a process button once the page allows it (one action at a time)."""
    selector = f'{node_row(name)} button[data-action="{action}"]'
    wait_until(
        driver,
        lambda d: d.execute_script(
            "const b = document.querySelector(arguments[0]); return b && !b.disabled", selector
        ),
        f"the {action} button of {name} enabled",
        ACTION_DEADLINE,
    )
    click(driver, selector)


def fault_rows(driver: Any) -> dict[str, str]:
    """The timeline's rows: label -> "yes" while the fault lasts, else "no"."""
    rows: dict[str, str] = driver.execute_script(
        "const out = {}; for (const r of document.querySelectorAll('#faults-body tr[data-fault]'))"
        " { if (!(r.dataset.fault in out)) out[r.dataset.fault] = r.dataset.ongoing; }"
        " return out"
    )
    return rows


@rule("6.7")
def test_the_page_kills_pauses_and_restarts_nodes_and_shows_each_on_the_timeline(
    tmp_path: Path, browser: Any
) -> None:
    driver = browser
    with running_cluster(tmp_path, 3, "--probe-rate", "10") as cluster:
        node1, node2, node3 = cluster.node_urls
        for key in KEYS:  # on every replica
            answer = request("PUT", entity_url(node1, key, "3/3"), f"kept {key}".encode())
            assert answer.status == 201, answer
        driver.get(cluster.page)
        for name in ("node1", "node2", "node3"):
            wait_for_process(driver, name, "running")

        press(driver, "kill", "node3")
        wait_for_process(driver, "node3", "down")
        assert "exit code -9" in str(
            attribute(driver, f'{node_row("node3")} [data-field="process"] .badge', "title")
        )
        for url in (node1, node2):  # the other two serve on, at the default quorum
            key = f"while-down-{url[-5:]}"
            assert request("PUT", entity_url(url, key), b"v").status == 201
            assert request("GET", entity_url(url, key)).body == b"v"
        wait_until(
            driver, lambda d: fault_rows(d).get("kill -9 node3") == "yes", "kill on timeline"
        )
        save_screenshot(driver, SCREENSHOT)

        press(driver, "restart", "node3")
        wait_for_process(driver, "node3", "running")
        wait_until(
            driver,
            lambda d: (
                fault_rows(d).get("kill -9 node3") == fault_rows(d).get("restart node3") == "no"
            ),
            "the kill ended and the restart on the timeline",
        )

        # node3 came back with its acknowledged writes: with node1 and node2 paused, a
        # read at 1/3 through it can only answer from its own data.
        press(driver, "pause", "node1")
        wait_until(
            driver, lambda d: attribute(d, node_row("node1"), "data-process") == "paused", "paused"
        )
        press(driver, "pause", "node2")
        wait_until(
            driver,
            lambda d: attribute(d, node_row("node2"), "data-process") == "paused",
            "node2 paused",
        )
        for key in KEYS:
            answer = request("GET", entity_url(node3, key, "1/3"), timeout=10.0)
            assert (answer.status, answer.body) == (200, f"kept {key}".encode()), (key, answer)
        assert fault_rows(driver).get("pause node1") == "yes"
        press(driver, "resume", "node1")
        press(driver, "resume", "node2")
        for name in ("node1", "node2"):
            wait_for_process(driver, name, "running")
        wait_until(
            driver,
            lambda d: fault_rows(d).get("pause node1") == fault_rows(d).get("pause node2") == "no",
            "both pauses ended on the timeline",
        )
        assert driver.execute_script("return document.getElementById('error').hidden"), text_of(
            driver, "#error-text"
        )
    assert "exited with code -9 (SIGKILL); the other nodes serve on" in cluster.output()


@rule("6.7", "6.8")
def test_a_node_killed_from_a_terminal_is_on_the_timeline_until_its_restart(
    tmp_path: Path,
) -> None:
    """No browser: the cockpit watches the cluster's processes on its own."""
    from tests.cockpit.test_dashboard import wait_for_output

    with running_cluster(tmp_path, 3, "--probe-rate", "0") as cluster:
        states = json.loads(cluster.get("/processes").body)["nodes"]
        victim = states[1]
        os.kill(victim["pid"], signal.SIGKILL)
        wait_for_output(cluster, f"node {victim['url']} exited with code -9")
        faults = wait_timeline(cluster, lambda faults: bool(faults))
        assert faults[0]["label"] == "node2 exited (code -9)" and faults[0]["ongoing"], faults
        answer = cluster.ask("POST", "/processes/1/restart", timeout=60.0)
        assert answer.status == 200, answer
        faults = wait_timeline(
            cluster, lambda faults: len(faults) == 2 and not faults[-1]["ongoing"]
        )
        assert [fault["label"] for fault in faults] == ["restart node2", "node2 exited (code -9)"]
        # The same faults from a terminal, as `cluster pause|resume URL`: the cockpit's
        # watch puts the pause on its timeline, and ends it at the resume.
        data_dir = str(tmp_path / "data")
        for action, ongoing in (("pause", True), ("resume", False)):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dht",
                    "cluster",
                    action,
                    victim["url"],
                    "--data-dir",
                    data_dir,
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert done.returncode == 0 and f"{action}d {victim['url']}" in done.stdout, done
            faults = wait_timeline(
                cluster,
                lambda faults, ongoing=ongoing: (
                    faults[0]["label"] == "pause node2" and faults[0]["ongoing"] is ongoing
                ),
            )
        refused = cluster.ask("POST", "/processes/1/kill", headers={"X-Cockpit": "0"})
        assert refused.status == 403, refused
        refused = cluster.ask("POST", "/experiment/start")
        assert refused.status == 409 and b"probe load is off" in refused.body, refused


def wait_timeline(cluster: RunningCluster, done: Any) -> list[dict[str, Any]]:
    from dht.conformance.http_client import wait_for

    answer = wait_for(
        lambda: cluster.get("/timeline"),
        lambda answer: answer.status == 200 and done(json.loads(answer.body)["faults"]),
        deadline=10.0,
    )
    faults: list[dict[str, Any]] = json.loads(answer.body)["faults"]
    return faults


@rule("6.7", "6.8")
def test_the_clock_skew_toggle_restarts_a_dht_node_skewed_and_back(tmp_path: Path) -> None:
    """No browser: the page's skew button is this POST."""
    with running_cluster(tmp_path, 3, "--probe-rate", "0") as cluster:
        node2 = cluster.node_urls[1]
        skew = "/processes/1/skew"
        answer = cluster.ask("POST", skew, timeout=60.0)
        assert answer.status == 200 and b"120 s ahead" in answer.body, answer
        states = json.loads(cluster.get("/processes").body)["nodes"]
        assert [state["clock_skew"] for state in states] == [0.0, 120.0, 0.0]
        # Its peers refuse what it writes: versions 120 s ahead, past --max-clock-drift.
        refused = request("PUT", entity_url(node2, "skewed"), b"from the future")
        assert refused.status != 201, refused
        faults = wait_timeline(cluster, lambda faults: bool(faults))
        assert (faults[0]["label"], faults[0]["ongoing"]) == ("clock of node2 +120 s", True)
        answer = cluster.ask("POST", skew, timeout=60.0)
        assert answer.status == 200 and b"clock right again" in answer.body, answer
        assert b"stay ahead for up to 120 s more" in answer.body, answer
        node1 = cluster.node_urls[0]
        assert request("PUT", entity_url(node1, "right"), b"now").status == 201
        faults = wait_timeline(cluster, lambda faults: not faults[0]["ongoing"])
        assert faults[0]["label"] == "clock of node2 +120 s", faults
