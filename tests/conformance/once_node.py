"""An implementation that starts only once: started again on a data folder it has used,
it exits 1 before serving, as a store that cannot recover its own files would. The
first time it is the naive node (tests/naive/node.py). The kit must fail a nemesis run
whose node it cannot restart, and a shrink must keep the fault that needed the restart.

    python tests/conformance/once_node.py --port PORT --data-dir DIR --cluster URLS [--self URL]
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

NAIVE_NODE = Path(__file__).resolve().parents[1] / "naive" / "node.py"
MARK = "started-once"


def main() -> None:
    data_dir = Path(sys.argv[sys.argv.index("--data-dir") + 1])
    mark = data_dir / MARK
    if mark.exists():
        print(f"{data_dir} was used before: this node cannot start on it again", flush=True)
        sys.exit(1)
    data_dir.mkdir(parents=True, exist_ok=True)
    mark.touch()
    runpy.run_path(str(NAIVE_NODE), run_name="__main__")


if __name__ == "__main__":
    main()
