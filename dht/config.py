"""Every setting of a node, with its default, in one frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

MiB = 1024 * 1024
# The longest cluster secret: it travels in the replica channel's HELLO, which a node
# reads only up to a few KiB from a peer it does not know yet (SPEC.md rule 11.6).
MAX_SECRET_BYTES = 1024


@dataclass(frozen=True)
class NodeConfig:
    port: int
    data_dir: Path
    cluster: tuple[str, ...]
    self_url: str
    host: str = "127.0.0.1"
    timeout: float = 1.0
    breaker_threshold: int = 5
    breaker_cooldown: float = 2.0
    vnodes: int = 512
    max_value_bytes: int = 16 * MiB
    max_key_bytes: int = 64 * 1024
    max_in_flight: int = 512
    max_in_flight_bytes: int = 256 * MiB
    sync_writes: bool = False
    # Free space kept on the data volume: below it, writes are refused (507).
    disk_reserve: int = 32 * MiB
    secret: str | None = None
    hint_max_bytes: int = 256 * MiB
    hint_max_age: float = 3 * 3600.0
    hint_interval: float = 0.5
    # Seconds between anti-entropy exchanges with each peer (0: none), and the records a
    # second an exchange may move.
    anti_entropy_interval: float = 60.0
    anti_entropy_rate: float = 1000.0
    # A tombstone (or an expired record) older than this, and seen by every replica (an
    # exchange with each began after it was written), is removed for good.
    tombstone_grace: float = 86400.0
    log_level: str = "INFO"
    # How far ahead of this node's clock a version received from a peer may be.
    max_clock_drift: float = 60.0
    # Seconds added to this node's wall clock: the test bed's skewed-clock fault.
    clock_skew: float = 0.0
    # GET /metrics, and the counting behind it (off only to measure its cost).
    metrics: bool = True
    # Start as a node joining the cluster of the other --cluster entries (the joint phase
    # of a membership change) rather than as a member of all of them.
    join: bool = False
    # Records a second a handoff may send, after a membership change.
    handoff_rate: float = 5000.0
    # Peer URL -> URL actually dialled for it (a Toxiproxy link in the chaos test bed).
    routes: tuple[tuple[str, str], ...] = ()

    @property
    def max_clock_drift_ms(self) -> int:
        return round(self.max_clock_drift * 1000)

    def dial_url(self, peer: str) -> str:
        return dict(self.routes).get(peer, peer)


def normalize_url(url: str) -> str:
    """`http://host:port` with no trailing slash; raises ValueError for anything else."""
    parts = urlsplit(url.strip())
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"expected http://host:port, got {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"a node URL has no path or query: {url!r}")
    return f"http://{parts.netloc}"


def url_port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def resolve_self(cluster: tuple[str, ...], port: int, self_url: str | None) -> str:
    """`--self` if given (it must be in the cluster), else the entry whose port is `port`."""
    if self_url is not None:
        normalized = normalize_url(self_url)
        if normalized not in cluster:
            raise ValueError(f"--self {normalized} is not in --cluster")
        return normalized
    matches = [url for url in cluster if url_port(url) == port]
    if len(matches) != 1:
        raise ValueError(
            f"cannot tell which --cluster entry is this node from port {port} "
            f"({len(matches)} entries match); pass --self"
        )
    return matches[0]


def parse_route(text: str, cluster: tuple[str, ...]) -> tuple[str, str]:
    """`PEER_URL=DIAL_URL`: reach the node PEER_URL by dialling DIAL_URL. PEER_URL need not
    be in `cluster`: it may be a node that joins later (a membership change)."""
    peer, sep, dial = text.partition("=")
    if not sep:
        raise ValueError(f"--route takes PEER_URL=DIAL_URL, got {text!r}")
    return normalize_url(peer), normalize_url(dial)
