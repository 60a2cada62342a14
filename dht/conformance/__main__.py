"""`dht-conformance` and `python -m dht.conformance`: the kit's command (command.py), once
the kit's part of dht is known to be installed. Nothing of the kit is imported before
that, so an install without it gets one line saying what to install, not a traceback."""

from __future__ import annotations

import sys

from dht.extras import KIT, missing_line


def main(argv: list[str] | None = None) -> int:
    if (missing := missing_line("dht-conformance", [KIT])) is not None:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    from dht.conformance.command import main as grade

    return grade(argv)


if __name__ == "__main__":
    sys.exit(main())
