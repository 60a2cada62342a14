"""A pytest plugin that records what the conformance report needs of each spec test: its
tier and rules (markers, dht/conformance/rules.py), how it ended, and why it failed in one
line. Loaded by the kit (`-p dht.conformance.plugin --conformance-results PATH`); it
writes one JSON object per test to PATH when the session ends.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dht.conformance.spec import TIERS

MESSAGE_LENGTH = 400


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--conformance-results",
        metavar="PATH",
        help="write each test's tier, rules, outcome and failure line to PATH (JSON lines)",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--conformance-results")
    if path:
        config.pluginmanager.register(ResultRecorder(Path(path)), "conformance-recorder")


class ResultRecorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.results: dict[str, dict[str, Any]] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:  # those left after -m and -k
            tiers, rules = markers_of(item)
            # JUnit XML carries them as the test case's properties.
            item.user_properties += [("tier", ",".join(tiers)), ("rules", ",".join(rules))]
            self.results[item.nodeid] = {
                "test": f"{item.path.name}::{item.nodeid.split('::', 1)[1]}",
                "tier": tiers[0] if tiers else None,
                "rules": rules,
                "outcome": "not run",
                "message": "",
                "seconds": 0.0,
            }

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = self.results.get(report.nodeid)
        if result is None:
            return
        result["seconds"] = round(result["seconds"] + report.duration, 3)
        if report.when == "call" or (report.when == "setup" and not report.passed):
            result["outcome"] = "skipped" if report.skipped else report.outcome
        if report.failed and not result["message"]:
            result["message"] = one_line(report, report.when)
            result["outcome"] = "failed"
        elif report.skipped and not result["message"]:
            result["message"] = one_line(report, "skipped")

    def pytest_sessionfinish(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", encoding="utf-8") as out:
            for result in self.results.values():
                out.write(json.dumps(result) + "\n")


def markers_of(item: pytest.Item) -> tuple[list[str], list[str]]:
    """A spec test's tiers (there should be one) and the rule numbers it names."""
    tiers = [tier for tier in TIERS if item.get_closest_marker(tier)]
    return tiers, [number for marker in item.iter_markers("rule") for number in marker.args]


def one_line(report: pytest.TestReport, phase: str) -> str:
    """Why a test failed (or was skipped), as one line: the assertion's or the error's
    message without pytest's decoration, prefixed by the phase unless it is the test's
    own body."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        text = crash.message
    elif isinstance(longrepr, tuple):  # a skip: (file, line, reason)
        text = str(longrepr[2])
    else:
        text = str(longrepr)
    text = re.sub(r"^(AssertionError|Failed|Skipped): ", "", text.strip())
    first = text.partition("\n")[0]
    # A message of the test's own says it all; a bare `assert` needs pytest's "where"
    # lines, which show the values compared.
    text = text if first.startswith("assert ") else first
    text = " ".join(text.split())
    prefix = "" if phase == "call" else f"{phase}: "
    text = prefix + text
    return text if len(text) <= MESSAGE_LENGTH else text[: MESSAGE_LENGTH - 1] + "…"
