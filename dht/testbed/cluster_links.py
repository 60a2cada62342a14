"""The Toxiproxy links of a `python -m dht cluster --chaos`, made one of two ways: with
`--route` flags that tell each node to dial its peers through them (toxiproxy.py), or,
with `--netns`, by running each node in a network namespace where its peers' ports are
the links themselves (netns.py), with one Toxiproxy API over the servers of all the
namespaces (link_api.py). Either way the cluster starts its nodes through them and
prints one Toxiproxy API, where the links are named node1-to-node2 and so on.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from dht.testbed.link_api import LinkApi
    from dht.testbed.netns import NetnsTestbed
    from dht.testbed.toxiproxy import Testbed


class ClusterLinks(Protocol):
    api_url: str
    description: str  # one line for the cluster's banner: how a node reaches a peer

    def start_node(
        self, index: int, command: list[str], environment: dict[str, str]
    ) -> subprocess.Popen[bytes]: ...

    def stop(self) -> None: ...


class RoutedLinks:
    """One Toxiproxy on free loopback ports; each node is told its links by `--route`."""

    description = "node1 dials node2 through the proxy node1-to-node2, and so on"

    def __init__(self, testbed: Testbed) -> None:
        self.testbed = testbed
        self.api_url = testbed.api_url

    def start_node(
        self, index: int, command: list[str], environment: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(command + self.testbed.route_args(index), env=environment)

    def stop(self) -> None:
        self.testbed.stop()


class NamespaceLinks:
    """A network namespace per node; a node is told nothing, and every process of the
    test bed dies with the cluster's main thread (netns.py), so start it from there."""

    description = (
        "each node runs in a network namespace of its own, where 127.0.0.1:PORT of "
        "node2 is the proxy node1-to-node2, and so on"
    )

    def __init__(self, testbed: NetnsTestbed) -> None:
        from dht.testbed.link_api import LinkApi

        self.testbed = testbed
        links = {proxy.name: proxy.api_url for proxy in testbed.links.values()}
        self.api: LinkApi = LinkApi(links, testbed.api_urls)
        self.api_url = self.api.url
        # A short poll: `shutdown` waits for it, and Ctrl-C should not.
        threading.Thread(
            target=self.api.serve_forever, args=(0.05,), name="link-api", daemon=True
        ).start()

    def start_node(
        self, index: int, command: list[str], environment: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        return self.testbed.popen(index, command, env=environment)

    def stop(self) -> None:
        self.api.shutdown()
        self.api.server_close()
        self.testbed.stop()


def start_links(
    urls: list[str], ports: list[int], data_dir: Path, dashboard_port: int, netns: bool
) -> ClusterLinks:
    """Toxiproxy on free ports other than the nodes' and the dashboard's, which nothing
    listens on yet; its logs in `data_dir`."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if netns:
        from dht.testbed.netns import NetnsTestbed
        from dht.testbed.toxiproxy import free_ports

        api_port = free_ports(1, avoid=[*ports, dashboard_port])[0]
        return NamespaceLinks(NetnsTestbed(ports, data_dir, api_port=api_port).start())
    from dht.testbed.toxiproxy import Testbed

    testbed = Testbed(urls, data_dir / "toxiproxy.log", avoid=[dashboard_port])
    return RoutedLinks(testbed.start())
