"""dht/extras.py: which packages of an extra are missing, read from Requires-Dist lines,
and the one line a command says about them."""

from __future__ import annotations

import pytest

from dht import extras
from dht.extras import KIT, NODE, missing_from, missing_line

REQUIRES = [
    "aiohttp>=3.12",
    'uvloop>=0.19; extra == "node"',
    'plyvel>=1.5; extra == "node"',
    'pytest>=8; extra == "kit"',
    'toxiproxy-python>=0.1.1; extra == "kit"',
    'matplotlib>=3.7; extra == "bench"',
    'dht[kit,node]; extra == "test"',
]


def test_an_extra_s_missing_packages_are_those_of_its_marker_not_installed() -> None:
    installed = {"aiohttp", "uvloop", "pytest"}.__contains__
    assert missing_from(REQUIRES, NODE, installed) == ["plyvel"]
    assert missing_from(REQUIRES, KIT, installed) == ["toxiproxy-python"]
    # The base's requirements and other extras' are no extra's to miss.
    assert missing_from(REQUIRES, "none", lambda name: False) == []


def test_nothing_is_missing_when_every_package_is_installed() -> None:
    assert missing_from(REQUIRES, NODE, lambda name: True) == []


def test_the_line_names_the_part_its_missing_packages_and_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = {NODE: ["uvloop", "plyvel"], KIT: []}
    monkeypatch.setattr(extras, "missing_packages", missing.__getitem__)
    assert missing_line("python -m dht node", [NODE]) == (
        "python -m dht node needs dht's node, which is not installed here "
        "(no uvloop, plyvel): pip install 'dht[node]'"
    )
    assert missing_line("dht-conformance", [KIT]) is None
    line = missing_line("dht-conformance", [KIT, NODE], instead="give --node-command")
    assert line is not None and line.endswith(
        "(no uvloop, plyvel): give --node-command, or pip install 'dht[node]'"
    )
    assert "\n" not in line
