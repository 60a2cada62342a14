"""`/v0/admin/topology`: read this node's membership step, or move it to the next one.

The driver of a change (`dht.membership.driver`) PUTs every step to every node, and goes
on only when every node has answered 200: that is how no two nodes end up more than one
step apart. A PUT answers only once no client operation placed by the step before is
still running on this node (503 with Retry-After if that takes longer than the deadline;
the step is taken all the same, and the same PUT again is harmless).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from dht.membership.step import StepApplier
from dht.model.topology import BadTransition, TopologyState
from dht.storage.membership import Membership
from dht.transport.wire import CLOCK_HEADER, TOPOLOGY_PATH
from dht.web.server import Params, Route, text

# The body of a request that proved the cluster secret, or the answer refusing it.
Guard = Callable[[web.BaseRequest], Awaitable[bytes | web.Response]]


class MembershipApi:
    def __init__(
        self,
        membership: Membership,
        steps: StepApplier,
        guard: Guard,
        wall_ms: Callable[[], int],
    ) -> None:
        """`steps` takes a step on this node; `guard` reads the body of a request that
        proves the cluster secret (when one is set), or refuses it; `wall_ms` is this
        node's wall clock, which every answer to a GET carries for the asking node's
        clock fence (SPEC.md rule 9.13)."""
        self._membership = membership
        self._steps = steps
        self._guard = guard
        self._wall_ms = wall_ms

    def routes(self) -> dict[str, Route]:
        return {TOPOLOGY_PATH: Route({"GET": self.show, "PUT": self.step}, counted=False)}

    async def show(self, request: web.BaseRequest, params: Params) -> web.Response:
        clock = {CLOCK_HEADER: str(self._wall_ms())}
        return web.json_response(self._membership.state.to_json(), headers=clock)

    async def step(self, request: web.BaseRequest, params: Params) -> web.Response:
        body = await self._guard(request)
        if isinstance(body, web.Response):
            return body
        try:
            proposed = TopologyState.from_json(json.loads(body))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
            return text(400, f"Bad Request: {exc}")
        try:
            drained = await self._steps.apply(proposed)
        except BadTransition as exc:
            now = self._membership.state
            return text(409, f"Conflict: this node is {now.phase} (epoch {now.epoch}): {exc}")
        if not drained:
            return text(
                503,
                "Unavailable: operations of the previous step are still running; PUT again",
                {"Retry-After": "1"},
            )
        return web.json_response(self._membership.state.to_json())
