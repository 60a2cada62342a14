"""A throwaway certificate authority for the test bed (`cluster --tls`, the test suite's
`DHT_TLS=1`): a CA in a folder, and a certificate for each node, made with python-trio's
trustme (on `cryptography`).

Certificates made this way are for one machine's test clusters: the CA's key sits next
to its certificate, unprotected. docs/security.md ("TLS between nodes") says how to make them
for real hosts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import trustme

# The names a node on this machine answers to: its certificate names all of them.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class NodeCertificate:
    cert: Path
    key: Path
    ca: Path

    def flags(self) -> list[str]:
        """The node flags that make it use these files."""
        return ["--tls-cert", str(self.cert), "--tls-key", str(self.key), "--tls-ca", str(self.ca)]


class LocalCA:
    """The CA of `folder` (`ca.pem`, `ca-key.pem`), made there on first use and read
    back afterwards, so a restarted or added node gets a certificate from the same one."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cert = folder / "ca.pem"
        key = folder / "ca-key.pem"
        if self.cert.exists() and key.exists():
            self._ca = trustme.CA.from_pem(self.cert.read_bytes(), key.read_bytes())
            return
        folder.mkdir(parents=True, exist_ok=True)
        self._ca = trustme.CA(organization_name="dht test bed")
        _write_private(key, self._ca.private_key_pem.bytes())
        self._ca.cert_pem.write_to_path(str(self.cert))

    def issue(self, name: str, hosts: tuple[str, ...] = LOCAL_HOSTS) -> NodeCertificate:
        """A certificate for the node `name` (a file name), naming `hosts`: made once,
        then the same files."""
        cert, key = self.folder / f"{name}.pem", self.folder / f"{name}-key.pem"
        if not (cert.exists() and key.exists()):
            leaf = self._ca.issue_cert(*hosts, common_name=name, organization_name="dht test bed")
            _write_private(key, leaf.private_key_pem.bytes())
            cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        return NodeCertificate(cert, key, self.cert)


def _write_private(path: Path, data: bytes) -> None:
    """Writes a private key readable by its owner only."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
