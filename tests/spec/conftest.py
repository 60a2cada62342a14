"""Every spec test belongs to exactly one tier and names the SPEC.md rules it checks
(tests/spec/rules.py). Collection stops with the list of offenders otherwise, so the
conformance report can always point a failure at a numbered paragraph."""

from __future__ import annotations

from pathlib import Path

import pytest

from dht.conformance.plugin import markers_of
from dht.conformance.spec import TIERS, load_rules

HERE = Path(__file__).parent


def problems_of(item: pytest.Item, rules: dict[str, str]) -> list[str]:
    """What is wrong with a test's markers; `rules` maps each rule number to its tier."""
    tiers, numbers = markers_of(item)
    problems = []
    if len(tiers) != 1:
        problems.append(f"has tiers {tiers or 'none'}; it needs exactly one of {TIERS}")
    if not numbers:
        problems.append("names no rule; add @rule(...) from tests/spec/rules.py")
    for number in numbers:
        if number not in rules:
            problems.append(f"names rule {number}, which SPEC.md does not have")
        elif tiers and tiers[0] != "dht" and rules[number] != tiers[0]:
            problems.append(f"is in tier {tiers[0]} but names rule {number} of {rules[number]}")
    return problems


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rules = {number: rule.tier for number, rule in load_rules().items()}
    offenders = [
        f"{item.nodeid} {problem}"
        for item in items
        if HERE in item.path.parents
        for problem in problems_of(item, rules)
    ]
    if offenders:
        raise pytest.UsageError(
            "spec tests without a proper tier or rule:\n" + "\n".join(offenders)
        )
