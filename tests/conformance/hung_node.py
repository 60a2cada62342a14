"""An implementation that hangs: it answers /v0/status, so it looks started, and never
answers anything else. The conformance kit must fail its rules one by one, each at the
kit's --rule-timeout, and still finish the run with a report.

    python tests/conformance/hung_node.py --port PORT
"""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web


async def dispatch(request: web.Request) -> web.Response:
    if request.path != "/v0/status":
        await asyncio.sleep(3600)
    return web.Response(text="ok")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", dispatch)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, shutdown_timeout=0.1)


if __name__ == "__main__":
    main()
