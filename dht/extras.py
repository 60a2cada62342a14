"""The two installs of dht, and the one line a command says when its part is missing.

One wheel holds every module of dht; pyproject.toml's extras decide which third-party
packages come with it: `dht[node]` what a node runs on (LevelDB, uvloop), `dht[kit]` what
the conformance kit, the test bed and the history checker run on (pytest, hypothesis,
matplotlib, Toxiproxy's client, trustme, mfusepy). A command asks here, before it
imports anything of its part, so a part that is not installed reads as the pip command
that installs it rather than as an ImportError deep inside. What an extra holds is read
back from the installed distribution's metadata: pyproject.toml stays its one
declaration. Imports nothing of dht, so every layer may ask.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata

DISTRIBUTION = "dht"
NODE = "node"
KIT = "kit"
# What a user knows each extra as, in the one line.
PARTS = {NODE: "dht's node", KIT: "the conformance kit and test bed"}

_EXTRA = re.compile(r"""\bextra\s*==\s*["']([^"']+)["']""")
_PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def missing_from(
    requirements: Iterable[str], extra: str, installed: Callable[[str], bool]
) -> list[str]:
    """The projects that `extra` requires (`requirements` as the metadata's
    Requires-Dist lines, `plyvel>=1.5; extra == "node"`) and `installed` says are not."""
    missing = []
    for requirement in requirements:
        project, _, marker = requirement.partition(";")
        if extra not in _EXTRA.findall(marker):
            continue
        name = _PROJECT.match(project.strip())
        if name is not None and not installed(name.group()):
            missing.append(name.group())
    return missing


def is_installed(project: str) -> bool:
    try:
        metadata.distribution(project)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing_packages(extra: str) -> list[str]:
    """The projects of `extra` that are not installed here. None are when dht itself
    was never installed (a clone on sys.path): no metadata says what the extra holds,
    and a package that is missing then shows as its ImportError."""
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    return missing_from(requirements, extra, is_installed)


def missing_line(command: str, extras: Sequence[str], instead: str | None = None) -> str | None:
    """One line: which of `extras` `command` needs and lacks, and the pip command that
    adds them (after `instead`, another way out, when there is one); None when every
    package of `extras` is installed."""
    lacking = {extra: names for extra in extras if (names := missing_packages(extra))}
    if not lacking:
        return None
    parts = " and ".join(PARTS.get(extra, f"dht[{extra}]") for extra in lacking)
    packages = ", ".join(name for names in lacking.values() for name in names)
    install = f"pip install '{DISTRIBUTION}[{','.join(lacking)}]'"
    remedy = f"{instead}, or {install}" if instead else install
    verb = "is" if len(lacking) == 1 else "are"
    return f"{command} needs {parts}, which {verb} not installed here (no {packages}): {remedy}"
