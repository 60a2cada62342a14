"""TLS between nodes (`--tls-cert`, `--tls-key`, `--tls-ca`): the contexts both ends use,
and the count of peers refused for want of a valid certificate.

Every node-to-node connection is TLS with a certificate at both ends, each checked
against the cluster's CA; a node dialling a peer also checks that the certificate names
the host of the peer's `--cluster` entry (as a browser checks a site's). The node's one
port still serves clients in plain HTTP: a connection whose first byte is 0x16 (a TLS
ClientHello) is TLS, and inside it the first byte tells the replica channel from HTTP
again (`dht.web.listener`). A client may use https on the same port, with no
certificate of its own; a peer's calls (the replica channel, the local range,
anti-entropy) need one.
"""

from __future__ import annotations

import logging
import ssl
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dht.model.log_limits import RateLimitedLog
from dht.transport.messages import LocalTransportError

log = logging.getLogger(__name__)

# The first byte of a TLS record carrying a handshake (a ClientHello, to a server).
TLS_HANDSHAKE = 0x16

NO_CERTIFICATE = "no certificate"
TLS_ONLY = (
    "this node takes node-to-node traffic over TLS only, with a certificate the cluster's "
    "CA signed (--tls-cert, --tls-key, --tls-ca)"
)


class TlsSetupError(LocalTransportError):
    """A certificate, key or CA file that cannot be used: the node does not start."""


class TlsRefusals:
    """Peers refused for want of a valid certificate, by reason, for `/v0/status` and
    `/metrics`; each logged, a few lines per reason and interval at most."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.last: str | None = None
        self._log = RateLimitedLog(log)

    def refused(self, reason: str, peer: str, detail: str, logged: bool = False) -> None:
        """A connection or request from `peer` was refused: `reason` is the counter's
        label (few distinct values), `detail` what the log says (unless the caller
        `logged` it already)."""
        self.counts[reason] += 1
        self.last = f"{peer}: {detail}"
        if not logged:
            self._log.warning("tls-" + reason, "refused %s: %s", peer, detail)

    def status(self) -> dict[str, Any]:
        return {"refused": dict(self.counts), "last_refused": self.last}


@dataclass
class TlsContexts:
    """`server` takes a connection (a peer's certificate is asked for, a client's is
    optional); `client` dials a peer (it presents this node's certificate and checks
    the peer's, host name included)."""

    server: ssl.SSLContext
    client: ssl.SSLContext
    refusals: TlsRefusals = field(default_factory=TlsRefusals)


def load_contexts(cert: Path, key: Path, ca: Path) -> TlsContexts:
    """Both contexts from the node's files; TlsSetupError says which file is wrong."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for context in (server, client):
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSetupError(
                f"cannot use --tls-cert {cert} with --tls-key {key}: {exc}"
            ) from None
        try:
            context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSetupError(f"cannot use --tls-ca {ca}: {exc}") from None
    server.verify_mode = ssl.CERT_OPTIONAL  # clients need none; peers are checked by use
    client.verify_mode = ssl.CERT_REQUIRED
    client.check_hostname = True
    return TlsContexts(server, client)


def handshake_reason(error: BaseException) -> str:
    """The counter's label for a failed TLS handshake."""
    if isinstance(error, ssl.SSLCertVerificationError) or (
        getattr(error, "reason", None) == "CERTIFICATE_VERIFY_FAILED"
    ):
        return "bad certificate"
    if isinstance(error, ssl.SSLError):
        return "handshake failed"
    return "handshake cut off"
