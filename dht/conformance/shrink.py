"""Delta debugging (Zeller's ddmin) over a failing run's faults (pure): the smallest
subset that still fails, found by re-running subsets. Each try is a whole run, so the
search stops when its time budget is spent and returns the smallest failing subset
found so far, saying whether it is 1-minimal (no single fault can be left out).

A try has three outcomes, as in Zeller's paper: it fails, it passes, or it is
unresolved (it could not run: what it would have shown is unknown). An unresolved try
is not reduced to, as a passing one is not, but it is never taken for a pass where
that matters: a result is 1-minimal only if every try that shows it resolved."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Shrunk(Generic[T]):
    """What the search found: `smallest` still fails; `minimal` when leaving out any
    one of its items was tried and passes (the search finished within its budget, and
    none of those tries was unresolved); `tries` the runs it made, `unresolved` how many
    of them could not say; `finished` False when the budget ended the search."""

    smallest: tuple[T, ...]
    minimal: bool
    tries: int
    unresolved: int = 0
    finished: bool = True


class _OutOfTime(Exception):
    """The budget has no room for the next try."""


def ddmin(
    items: Sequence[T],
    fails: Callable[[tuple[T, ...]], bool | None],
    out_of_time: Callable[[tuple[T, ...]], bool] = lambda subset: False,
) -> Shrunk[T]:
    """Shrinks `items` (which fail) to a 1-minimal failing subset, in their order.
    `fails(subset)` runs a subset: True if it fails, False if it passes, None if it is
    unresolved (module docstring). `out_of_time(subset)` is asked before each try (a
    try's cost may depend on its subset), and once it is true the search ends with what
    it has. The empty subset is tried first: a run that fails with no fault at all is
    not the faults' doing."""
    current = tuple(items)
    tries = unresolved = 0

    def attempt(subset: tuple[T, ...]) -> bool | None:
        nonlocal tries, unresolved
        if out_of_time(subset):
            raise _OutOfTime
        tries += 1
        verdict = fails(subset)
        if verdict is None:
            unresolved += 1
        return verdict

    try:
        empty = attempt(())
        if empty:
            return Shrunk((), True, tries, unresolved)
        granularity = 2
        # Whether the tries that show `current` 1-minimal all resolved: for one item,
        # the empty subset; for more, the last round (each item left out in turn).
        resolved = empty is not None
        while len(current) >= 2:
            chunks = split(current, granularity)
            reduced = False
            resolved = True
            for index, chunk in enumerate(chunks):
                verdict = attempt(chunk)
                if verdict:
                    current, granularity, reduced = chunk, 2, True
                    break
                resolved = resolved and verdict is not None
                if granularity == 2:
                    continue  # the complement of one half is the other half, just tried
                complement = tuple(
                    item for other, c in enumerate(chunks) if other != index for item in c
                )
                verdict = attempt(complement)
                if verdict:
                    current, granularity, reduced = complement, max(granularity - 1, 2), True
                    break
                resolved = resolved and verdict is not None
            if not reduced:
                if granularity >= len(current):
                    break
                granularity = min(granularity * 2, len(current))
        if len(current) < 2:
            resolved = empty is not None
    except _OutOfTime:
        return Shrunk(current, False, tries, unresolved, finished=False)
    return Shrunk(current, resolved, tries, unresolved)


def split(items: tuple[T, ...], parts: int) -> list[tuple[T, ...]]:
    """`items` in `parts` consecutive chunks of sizes differing by at most one."""
    size, extra = divmod(len(items), parts)
    chunks, at = [], 0
    for index in range(parts):
        length = size + (1 if index < extra else 0)
        chunks.append(items[at : at + length])
        at += length
    return [chunk for chunk in chunks if chunk]
