"""A deliberately simple implementation of the v0 single-node API, for the conformance
kit's own test: an aiohttp server over a dict. It keeps the single-node contract (SPEC.md
sections 1 and 2) and nothing more: no replication (each node answers from its own dict,
whatever `replicas` says) and no durability (the dict dies with the process). The kit
must pass it on `core` and `range` and fail it on `replication` and `durability`, each
failure saying why.

    python tests/conformance/simple_node.py --port PORT --cluster URL[,URL...]
        [--self URL] [--course-topology]

With --course-topology it finds itself in --cluster as the course's implementations do,
by the exact string `http://localhost:PORT` (and --self, if given, must be that
string), and exits 1 before serving when it is not there.
"""

from __future__ import annotations

import argparse
import re

from aiohttp import web

REPLICAS = re.compile(r"(\d+)/(\d+)")
ENTITY_METHODS = ("GET", "PUT", "DELETE")


def parse_replicas(text: str | None, cluster_size: int) -> bool:
    """Whether `replicas` is absent or a valid ack/from for this cluster."""
    if text is None:
        return True
    match = REPLICAS.fullmatch(text)
    if match is None:
        return False
    ack, from_ = int(match[1]), int(match[2])
    return 1 <= ack <= from_ <= cluster_size


class SimpleStore:
    def __init__(self, cluster_size: int) -> None:
        self.cluster_size = cluster_size
        self.values: dict[str, bytes] = {}

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/v0/status":
            return web.Response(text="ok")
        if request.path == "/v0/entity":
            return await self.entity(request)
        if request.path == "/v0/entities":
            return await self.entities(request)
        return web.Response(status=400, text="unknown path")

    async def entity(self, request: web.Request) -> web.Response:
        key = request.query.get("id", "")
        if not key:
            return web.Response(status=400, text="id is required")
        if not parse_replicas(request.query.get("replicas"), self.cluster_size):
            return web.Response(status=400, text="bad replicas")
        if request.method == "GET":
            if key not in self.values:
                return web.Response(status=404, text="not found")
            return web.Response(body=self.values[key])
        if request.method == "PUT":
            self.values[key] = await request.read()
            return web.Response(status=201, text="created")
        if request.method == "DELETE":
            self.values.pop(key, None)
            return web.Response(status=202, text="accepted")
        return web.Response(status=405, text="method not allowed")

    async def entities(self, request: web.Request) -> web.StreamResponse:
        start = request.query.get("start", "")
        end = request.query.get("end") or None
        if not start:
            return web.Response(status=400, text="start is required")
        low, high = start.encode(), None if end is None else end.encode()
        keys = sorted(
            (key.encode(), key)
            for key in self.values
            if low <= key.encode() and (high is None or key.encode() < high)
        )
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for encoded, key in keys:
            if key in self.values:
                await response.write(encoded + b"\n" + self.values[key])
        await response.write_eof()
        return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cluster", default="", help="comma-separated node URLs")
    parser.add_argument("--self", dest="self_url", help="this node's URL in --cluster")
    parser.add_argument(
        "--course-topology",
        action="store_true",
        help="find this node in --cluster by the string http://localhost:PORT, or exit 1",
    )
    args = parser.parse_args()
    if args.course_topology:
        own = f"http://localhost:{args.port}"
        if own not in args.cluster.split(",") or args.self_url not in (None, own):
            raise SystemExit(f"simple-node: {own} is not in --cluster {args.cluster}")
    store = SimpleStore(max(1, len([url for url in args.cluster.split(",") if url])))
    app = web.Application(
        client_max_size=64 * 1024 * 1024,
        # Keys of 10,000 characters make request lines of over 100 KB.
        handler_args={"max_line_size": 1 << 20, "max_field_size": 1 << 20},
    )
    app.router.add_route("*", "/{tail:.*}", store.dispatch)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
