"""Makes the compose cluster's TLS files (deploy/compose.tls.yaml): a CA and, for each
node, a certificate naming its service (`dht-1`, ...), its host in `--cluster`.

    python deploy/certificates.py deploy/secrets/tls

The CA comes from the test bed (dht/testbed/certificates.py): its key sits next to its
certificate, fine for a cluster on one machine, not for real hosts (docs/security.md, "TLS
between nodes", says how to make those). Files already there are kept, so the nodes' certificates
stay signed by one CA. Every file is made readable by all, for the node's user in the
container (another uid than the host's owner): the folder, its owner's only, guards them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dht.testbed.certificates import LocalCA

NODES = ("dht-1", "dht-2", "dht-3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where to write ca.pem and NODE{,-key}.pem")
    folder = parser.parse_args().folder
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca = LocalCA(folder)
    for name in NODES:
        files = ca.issue(name, hosts=(name,))
        for path in (files.cert, files.key, files.ca):
            path.chmod(0o444)
    print(f"TLS files for {', '.join(NODES)} in {folder}")


if __name__ == "__main__":
    main()
