"""The URLs {cluster} and {self} give a node (dht/testbed/node_template.py): the course's
form, http://localhost:PORT, for another implementation, which finds itself in the list
by that string; http://127.0.0.1:PORT for dht's own nodes, which bind that address; and
the numeric form for another implementation when asked (the kit's --topology-host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.command import parse_args
from dht.conformance.launcher import TOPOLOGY_HOST_ENV, Cluster

OTHER_COMMAND = "my-node --port {port} --topology {cluster} --me {self}"


@pytest.fixture(autouse=True)
def no_topology_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOPOLOGY_HOST_ENV, raising=False)
    monkeypatch.delenv("DHT_NODE_COMMAND", raising=False)


def given(cluster: Cluster, index: int) -> tuple[str, str]:
    """What node `index`'s command gets for --topology and --me."""
    argv = cluster[index].command()
    return argv[argv.index("--topology") + 1], argv[argv.index("--me") + 1]


def test_another_implementation_is_given_the_course_form(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DHT_NODE_COMMAND", OTHER_COMMAND)
    cluster = Cluster(tmp_path, 2, ports=[4101, 4102])
    topology = "http://localhost:4101,http://localhost:4102"
    assert given(cluster, 0) == (topology, "http://localhost:4101")
    assert given(cluster, 1) == (topology, "http://localhost:4102")
    assert cluster[1].url == "http://127.0.0.1:4102"  # where the tests reach it


def test_another_implementation_is_given_the_numeric_form_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DHT_NODE_COMMAND", OTHER_COMMAND)
    monkeypatch.setenv(TOPOLOGY_HOST_ENV, "127.0.0.1")
    cluster = Cluster(tmp_path, 2, ports=[4101, 4102])
    assert given(cluster, 1) == (
        "http://127.0.0.1:4101,http://127.0.0.1:4102",
        "http://127.0.0.1:4102",
    )


def test_dht_own_nodes_are_given_the_address_they_bind(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2, ports=[4101, 4102])
    assert cluster.urls == ["http://127.0.0.1:4101", "http://127.0.0.1:4102"]
    argv = cluster[0].command()
    assert argv[argv.index("--self") + 1] == "http://127.0.0.1:4101"


def test_the_kit_gives_a_node_command_the_course_form_unless_asked() -> None:
    assert parse_args(["--node-command", OTHER_COMMAND]).topology_host == "localhost"
    asked = ["--node-command", OTHER_COMMAND, "--topology-host", "127.0.0.1"]
    assert parse_args(asked).topology_host == "127.0.0.1"
    assert parse_args([]).topology_host == "127.0.0.1"  # dht's own nodes
    assert parse_args(["--topology-host", "localhost"]).topology_host == "localhost"


def test_the_kit_refuses_another_topology_host(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--topology-host", "0.0.0.0"])
    assert "invalid choice: '0.0.0.0'" in capsys.readouterr().err
