"""The pure parts of grading a cluster the kit did not start (dht/conformance/
running_cluster.py): reading --nodes, checking and filling a control command, and which
test is skipped on such a cluster and why."""

from __future__ import annotations

import pytest

from dht.conformance.report import RunFacts, SpecTestResult, opening_lines, render
from dht.conformance.running_cluster import (
    Controls,
    control_argv,
    control_problem,
    parse_node_urls,
    skip_reason,
)

WHERE = "on a running cluster (--nodes): "
KILL_AND_START = Controls({"kill": "podman kill -s KILL dht-{number}", "start": "podman start"})


def test_nodes_are_read_in_order_without_a_trailing_slash() -> None:
    assert parse_node_urls("http://10.0.0.1:8080/, http://node-b:8081") == [
        "http://10.0.0.1:8080",
        "http://node-b:8081",
    ]


@pytest.mark.parametrize(
    "text, said",
    [
        ("", "give comma-separated URLs"),
        ("http://a:1,,http://b:2", "give comma-separated URLs"),
        ("a:8080", "'a:8080' is not a node's URL"),
        ("https://a:8080", "is not a node's URL"),
        ("http://a", "is not a node's URL"),
        ("http://a:99999", "is not a node's URL"),
        ("http://a:8080/v0", "is not a node's URL"),
        ("http://user@a:8080", "is not a node's URL"),
        ("http://a:8080,http://a:8080/", "names a node twice"),
    ],
)
def test_a_malformed_node_list_is_refused_saying_why(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_node_urls(text)


def test_a_control_is_filled_per_node_and_split_without_a_shell() -> None:
    argv = control_argv(
        "ssh {host} 'kill -9 $(cat /run/dht-{number}.pid)' # {index} {port}", 1, "http://b:8081"
    )
    assert argv == ["ssh", "b", "kill -9 $(cat /run/dht-2.pid)", "#", "1", "8081"]
    assert control_argv("curl -X POST {url}/stop", 0, "http://a:1") == [
        "curl", "-X", "POST", "http://a:1/stop",
    ]  # fmt: skip


def test_a_control_with_an_unknown_placeholder_or_nothing_in_it_is_refused() -> None:
    assert control_problem("kill", "podman kill dht-{number}") is None
    assert "unknown placeholder {name}" in str(control_problem("kill", "podman kill {name}"))
    assert control_problem("stop", "  ") == "--stop-command is empty"
    assert "--pause-command" in str(control_problem("pause", "podman pause {"))


def test_a_control_that_takes_a_node_away_needs_the_one_that_gives_it_back() -> None:
    assert KILL_AND_START.missing(["kill"]) == []
    assert KILL_AND_START.missing(["stop"]) == ["stop"]
    assert KILL_AND_START.missing(["pause"]) == ["pause", "resume"]
    assert Controls({"kill": "k"}).missing(["kill"]) == ["start"]


def test_tiers_and_fixtures_only_the_kits_own_nodes_give_are_skipped_saying_why() -> None:
    def reason(tier: str, fixtures: tuple[str, ...] = ()) -> str | None:
        return skip_reason(tier, fixtures, (), None, KILL_AND_START, 3)

    assert str(reason("power")).startswith(WHERE + "power needs each node's folder")
    assert str(reason("range")).startswith(WHERE + "range needs an empty store")
    assert str(reason("faults", ("start_linked_cluster",))).startswith(WHERE + "link faults")
    assert str(reason("core", ("unstarted_node",))).startswith(WHERE + "needs a node process")
    assert reason("core", ("node",)) is None


def test_a_test_needing_its_node_alone_or_a_control_not_given_is_skipped() -> None:
    alone = skip_reason("durability", (), ("kill",), "replicas hide it", KILL_AND_START, 3)
    assert (
        alone == WHERE + "needs its node alone in its cluster (replicas hide it); --nodes gives 3"
    )
    assert skip_reason("durability", (), ("kill",), "replicas hide it", KILL_AND_START, 1) is None
    paused = skip_reason("faults", (), ("pause",), None, KILL_AND_START, 3)
    assert paused == WHERE + "needs --pause-command, --resume-command, not given"


def test_the_report_names_the_controls_and_a_skipped_kill_test_judges_nothing() -> None:
    facts = RunFacts(
        "the running cluster http://a:1", ("durability",), "now", 1.0, "SPEC.md",
        controls=(("kill", "podman kill dht-{number}"),),
    )  # fmt: skip
    skipped = SpecTestResult("test_durability.py::test_kill", "durability", ("4.1",), "skipped",
                             "on a running cluster", 0.0)  # fmt: skip
    stopped = SpecTestResult("test_durability.py::test_term", "durability", ("4.2",), "passed",
                             "", 0.0)  # fmt: skip
    report = render([skipped, stopped], {}, facts)
    assert "- Controls: kill `podman kill dht-{number}`" in report
    _, data = opening_lines([skipped, stopped], [], ("durability",))
    assert data.startswith("**Loses, undoes or invents data under faults?** Not judged"), data
