"""The reference: a bare aiohttp + uvloop server that answers every request with 200.

Whatever rate it sustains is the ceiling of this stack on this machine, so dht's figures
read as a share of it. `python -m bench.bare_server --port 8099`
"""

from __future__ import annotations

import argparse

from aiohttp import web


async def answer(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=b"")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    import uvloop

    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
