"""The fence: a node removed from the cluster stops serving clients (SPEC.md rule 13.9).

A node that was down or cut off while the others removed it (`membership --dead`) comes
back in the step it had: its own ring, its own data, possibly stale. Its peers already
refuse its replica calls, hints and anti-entropy, since it shares no ring with them
(rule 11.5); this makes it say so to its clients too, instead of answering from its own
data. At start and every `interval` it asks its peers for their membership step; when
a peer is at a later step that leaves it out, or its own step does (a removal it took
part in), it is fenced: saved in `fenced.json` in its data folder, so a restart stays
fenced, until an operator wipes the folder (and, to bring the machine back, joins it
again with `--join`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

import aiohttp

from dht.model.topology import TopologyState, removed
from dht.replication.background import OwnedTask
from dht.replication.peers import PeerError, Peers
from dht.replication.wire import TOPOLOGY_PATH
from dht.storage.membership import Membership, save_json

log = logging.getLogger(__name__)

FENCE_FILE = "fenced.json"
CHECK_INTERVAL = 5.0
# How long a starting node waits for its peers' steps before it serves (rule 1.1 gives it
# a second to answer /v0/status).
FIRST_CHECK_SECONDS = 0.5


def saved_fence(data_dir: Path) -> str | None:
    """The reason this node was fenced, if it was (and its folder was not wiped since)."""
    try:
        reason = json.loads((data_dir / FENCE_FILE).read_bytes())["reason"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"this node was removed from the cluster ({FENCE_FILE} unreadable: {exc})"
    return str(reason)


class FenceWatch:
    def __init__(
        self,
        self_url: str,
        data_dir: Path,
        membership: Membership,
        peers: Peers,
        fence: Callable[[str], None],
        interval: float = CHECK_INTERVAL,
    ) -> None:
        self._self_url = self_url
        self._path = data_dir / FENCE_FILE
        self._membership = membership
        self._peers = peers
        self._fence = fence
        self._interval = interval
        self.fenced: str | None = None
        self._task = OwnedTask("fence", self._run)

    async def first_check(self) -> None:
        """Before the node serves: one look, bounded by FIRST_CHECK_SECONDS (peers that
        hang are asked again by the watch), so a node removed while it was away never
        answers a client from its stale data."""
        await self.check(FIRST_CHECK_SECONDS)

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()

    async def _run(self) -> None:
        while self.fenced is None:
            await self.check()
            await asyncio.sleep(self._interval)

    async def check(self, within: float | None = None) -> None:
        """One look: this node's own step, then every peer's that answers within
        `within` seconds, asked all at once (one a step behind, or removed with it, says
        nothing; one that removed it does)."""
        own = self._membership.state
        if removed(own, None, self._self_url):
            self._set(f"this node was removed from the cluster (its step, epoch {own.epoch})")
            return
        peers = list(self._peers.by_url.items())
        asks = [asyncio.ensure_future(peer.get_json(TOPOLOGY_PATH)) for _, peer in peers]
        if asks:
            await asyncio.wait(asks, timeout=within)
        for (url, _), ask in zip(peers, asks, strict=True):
            if not ask.done():
                ask.cancel()
                continue
            try:
                theirs = TopologyState.from_json(ask.result())
            except (PeerError, ValueError, aiohttp.ClientError, asyncio.CancelledError):
                continue
            if removed(self._membership.state, theirs, self._self_url):
                self._set(
                    f"this node was removed from the cluster at epoch {theirs.epoch} (as "
                    f"{url} says, which serves {', '.join(theirs.current)}), or started "
                    "with a --cluster its peers do not list; its data may be stale. Wipe "
                    "its data folder, and start it with --join to bring it back"
                )
                return

    def _set(self, reason: str) -> None:
        self.fenced = reason
        self._fence(reason)  # first: a fence that cannot be saved still holds until exit
        log.error("fenced: %s", reason)
        try:
            save_json(self._path, {"reason": reason})
        except OSError as exc:
            log.error(
                "could not save the fence in %s (a restart would lift it): %s", self._path, exc
            )
