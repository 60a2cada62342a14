"""How a spec test says what it checks: one tier, and the rules of SPEC.md it holds.

A module sets its tier once (`pytestmark = pytest.mark.core`) and each test names its
rules (`@rule("1.3")`); tests/spec/conftest.py refuses a test with no tier, two tiers,
no rule, or a rule SPEC.md does not have, so a failed test always points at a numbered
paragraph of the spec. The tiers are the conformance kit's (dht/conformance).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])


def rule(*numbers: str) -> Callable[[F], F]:
    """Marks a test as checking these rules of SPEC.md, for example `@rule("3.5")`."""
    marker: Callable[[F], F] = pytest.mark.rule(*numbers)
    return marker
