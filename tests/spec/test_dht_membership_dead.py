"""`python -m dht membership` when a node does not answer or is gone for good (SPEC.md
rules 13.7 and 13.8), and `cluster remove` of a node whose process is gone."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dht.conformance.http_client import expect
from dht.conformance.launcher import Cluster
from dht.conformance.rules import rule
from tests.launcher import run_module

pytestmark = pytest.mark.dht


def membership(*args: str, timeout: float = 60.0) -> tuple[int, str, str, float]:
    began = time.monotonic()
    done = run_module("dht", "membership", *args, timeout=timeout)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - began


def steps(cluster: Cluster, indexes: list[int]) -> list[tuple[int, str]]:
    states = [cluster.nodes[index].status()["membership"] for index in indexes]
    return [(state["epoch"], state["phase"]) for state in states]


@rule("13.7")
def test_a_node_that_does_not_answer_stops_the_change_within_10_s_before_any_step(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 4).start()
    try:
        urls = cluster.urls
        cluster.nodes[0].kill()
        code, out, err, seconds = membership("--node", urls[1], "--to", ",".join(urls[1:]))
        assert code == 1, (out, err)
        assert seconds < 20.0, seconds
        (line,) = err.strip().splitlines()
        assert f"{urls[0]} did not answer within 10 s" in line, line
        assert "no step was taken, the cluster serves on as it was" in line, line
        assert f"--dead {urls[0]} removes it" in line, line
        assert steps(cluster, [1, 2, 3]) == [(0, "stable")] * 3
        expect(cluster.nodes[1].put("still-serving", b"yes"), 201)
    finally:
        cluster.stop()


@rule("13.8")
def test_removing_a_dead_node_says_what_is_at_risk_and_two_dead_neighbours_need_accept_loss(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 4).start()
    try:
        urls = cluster.urls
        for index in range(40):
            expect(cluster.nodes[2].put(f"k{index}", b"v", "2/3"), 201)
        cluster.nodes[0].kill()
        cluster.nodes[1].kill()
        dead = ",".join(urls[:2])
        to = ",".join(urls[2:])
        code, out, err, _ = membership("--node", urls[2], "--to", to, "--dead", dead)
        assert code == 1, (out, err)
        assert "writes at 1/1: " in out and "writes at 2/3: " in out, out
        assert "no live copy" in out, out
        assert "--accept-loss goes on without them" in err, err
        assert steps(cluster, [2, 3]) == [(0, "stable")] * 2  # refused before any step
        code, out, err, _ = membership(
            "--node", urls[2], "--to", to, "--dead", dead, "--accept-loss"
        )
        assert code == 0, (out, err)
        assert steps(cluster, [2, 3]) == [(3, "stable")] * 2
        state = cluster.nodes[2].status()["membership"]
        assert sorted(state["current"]) == sorted(urls[2:]) and "dead" not in state
    finally:
        cluster.stop()


@rule("13.8")
def test_a_dead_node_cannot_stay_and_a_node_not_of_the_cluster_cannot_be_dead(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 3).start()
    try:
        urls = cluster.urls
        code, _, err, _ = membership("--node", urls[0], "--to", ",".join(urls), "--dead", urls[2])
        assert code == 1 and "a dead node can only leave" in err, err
        stranger = "http://127.0.0.1:1"
        code, _, err, _ = membership(
            "--node", urls[0], "--to", ",".join(urls[:2]), "--dead", f"{urls[2]},{stranger}"
        )
        assert code == 1 and f"{stranger} is named dead but is no node" in err, err
        assert json.loads(json.dumps(steps(cluster, [0, 1, 2]))) == [[0, "stable"]] * 3
    finally:
        cluster.stop()
