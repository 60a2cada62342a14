"""The course API's nodes as an adapter's store: dht's own, or any implementation
DHT_NODE_COMMAND names (as for the rest of the kit), three of them started by the
kit's launcher, each operation sent to one node at its default quorum (`traffic.attempt`).

What the course's contract promises (SPEC.md part one): every acknowledged write
survives kill -9 and is seen by a later quorum read, and a delete stays deleted; not
linearizability, which a Dynamo-style store with last-write-wins does not give (two
quorum reads racing one write may see it, then not see it). So the history checker
decides, and the linearizability checker's verdict is shown beside it.
"""

from __future__ import annotations

from pathlib import Path

from dht.conformance.launcher import Cluster
from dht.conformance.traffic import attempt
from dht.history.operation import Kind, Op


class CourseApiCluster:
    name = "course-api"
    promise = "acknowledged writes kept, quorum reads see them (SPEC.md part one)"

    def __init__(self, folder: Path, size: int = 3) -> None:
        self.cluster = Cluster(folder, size)
        self.members = self.cluster.nodes

    def start(self) -> None:
        self.cluster.start()

    def stop(self) -> None:
        for node in self.cluster.nodes:
            if node.running:
                node.resume()  # a paused node cannot act on SIGTERM
        self.cluster.stop()

    def kill(self, index: int) -> None:
        node = self.cluster.nodes[index]
        if node.running:
            node.resume()
        node.kill()

    def restart(self, index: int) -> None:
        self.cluster.nodes[index].start()

    def pause(self, index: int) -> None:
        self.cluster.nodes[index].pause()

    def resume(self, index: int) -> None:
        self.cluster.nodes[index].resume()

    def leader(self) -> int | None:
        return None  # every node coordinates

    def attempt(
        self, index: int, kind: Kind, key: str, value: bytes | None, timeout: float, name: str
    ) -> Op:
        return attempt(self.cluster.nodes[index], kind, key, value, timeout, node_name=name)
