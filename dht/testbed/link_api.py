"""One Toxiproxy API over the several servers of the namespace test bed (netns.py).

`cluster --chaos` prints one Toxiproxy API, and the cockpit's link buttons and scripts
talk to it: list the links, cut one, add a toxic, reset. With `--netns` each link lives
on the server of its source's namespace, so this small server, in the cluster's process
on 127.0.0.1, answers for all of them: it lists every link (`nodeA-to-nodeB`, not the
ingress and harness proxies behind them), sends a call about one link to the server
that holds it, and a reset to every server. It passes calls on and keeps no state; a
server that hangs (Shopify/toxiproxy#558) makes the call fail after the deadline, as
it would against that server itself.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("dht.testbed.cluster")

# Longer than Toxiproxy may take to answer 503 to a hung reset (25 s): its own answer,
# not our deadline, then says what happened.
CALL_TIMEOUT = 30.0


class LinkApi(ThreadingHTTPServer):
    """Serves on 127.0.0.1 (a free port by default) until `shutdown`. `links` maps each
    link's name to the API URL of the server holding it; `servers` is every server, all
    reset by POST /reset."""

    daemon_threads = True

    def __init__(self, links: dict[str, str], servers: list[str], port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _LinkApiHandler)
        self.links = links
        self.servers = servers

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def _call(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One call to a Toxiproxy server: its status and body, 502 if it gave none."""
    request = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError as exc:  # refused, or no answer within the deadline
        return 502, f"Toxiproxy {url} did not answer: {exc}\n".encode()


class _LinkApiHandler(BaseHTTPRequestHandler):
    server: LinkApi

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if method == "GET" and parts == ["proxies"]:
            self._answer(*self._all_links())
        elif method == "GET" and parts == ["version"]:
            self._answer(*_call("GET", self.server.servers[0] + "/version"))
        elif method == "POST" and parts == ["reset"]:
            self._answer(*self._reset())
        elif parts[0] == "proxies" and len(parts) > 1 and parts[1] in self.server.links:
            target = self.server.links[parts[1]] + self.path
            status, answer = _call(method, target, body if method == "POST" else None)
            if method != "GET":
                log.info("Toxiproxy %s %s: %d", method, self.path, status)
            self._answer(status, answer)
        else:
            self._answer(404, f"no such link or call: {method} {self.path}\n".encode())

    def _all_links(self) -> tuple[int, bytes]:
        merged: dict[str, Any] = {}
        for server in sorted(set(self.server.links.values())):
            status, answer = _call("GET", server + "/proxies")
            if status != 200:
                return status, answer
            merged |= {
                name: proxy
                for name, proxy in json.loads(answer).items()
                if self.server.links.get(name) == server
            }
        return 200, json.dumps(merged).encode()

    def _reset(self) -> tuple[int, bytes]:
        with ThreadPoolExecutor(len(self.server.servers)) as pool:
            answers = list(
                pool.map(lambda server: _call("POST", server + "/reset"), self.server.servers)
            )
        log.info("Toxiproxy reset of %d servers", len(answers))
        failed = [(status, answer) for status, answer in answers if status >= 300]
        return failed[0] if failed else (204, b"")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header(
            "Content-Type", "application/json" if body[:1] in (b"[", b"{") else "text/plain"
        )
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("link API: " + format, *args)
