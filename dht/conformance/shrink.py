"""Delta debugging (Zeller's ddmin) over a failing run's faults (pure): the smallest
subset that still fails, found by re-running subsets. Each try is a whole run, so the
search stops when its time budget is spent and returns the smallest failing subset
found so far, saying whether it is 1-minimal (no single fault can be left out)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Shrunk(Generic[T]):
    """What the search found: `smallest` still fails; `minimal` when leaving out any
    one of its items passes (the search finished within its budget); `tries` the runs
    it made."""

    smallest: tuple[T, ...]
    minimal: bool
    tries: int


def ddmin(
    items: Sequence[T],
    fails: Callable[[tuple[T, ...]], bool],
    out_of_time: Callable[[tuple[T, ...]], bool] = lambda subset: False,
) -> Shrunk[T]:
    """Shrinks `items` (which fail) to a 1-minimal failing subset, in their order.
    `fails(subset)` runs a subset; `out_of_time(subset)` is asked before each try (a
    try's cost may depend on its subset), and once it is true the search ends with what
    it has. The empty subset is tried first: a run
    that fails with no fault at all is not the faults' doing."""
    current = tuple(items)
    tries = 0

    def attempt(subset: tuple[T, ...]) -> bool | None:
        nonlocal tries
        if out_of_time(subset):
            return None
        tries += 1
        return fails(subset)

    empty = attempt(())
    if empty is None:
        return Shrunk(current, False, tries)
    if empty:
        return Shrunk((), True, tries)
    granularity = 2
    while len(current) >= 2:
        chunks = split(current, granularity)
        reduced = False
        for index, chunk in enumerate(chunks):
            verdict = attempt(chunk)
            if verdict is None:
                return Shrunk(current, False, tries)
            if verdict:
                current, granularity, reduced = chunk, 2, True
                break
            if granularity == 2:
                continue  # the complement of one half is the other half, just tried
            complement = tuple(
                item for other, c in enumerate(chunks) if other != index for item in c
            )
            verdict = attempt(complement)
            if verdict is None:
                return Shrunk(current, False, tries)
            if verdict:
                current, granularity, reduced = complement, max(granularity - 1, 2), True
                break
        if not reduced:
            if granularity >= len(current):
                break
            granularity = min(granularity * 2, len(current))
    return Shrunk(current, True, tries)


def split(items: tuple[T, ...], parts: int) -> list[tuple[T, ...]]:
    """`items` in `parts` consecutive chunks of sizes differing by at most one."""
    size, extra = divmod(len(items), parts)
    chunks, at = [], 0
    for index in range(parts):
        length = size + (1 if index < extra else 0)
        chunks.append(items[at : at + length])
        at += length
    return [chunk for chunk in chunks if chunk]
