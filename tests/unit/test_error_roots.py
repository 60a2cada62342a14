"""One error root per boundary (h11's ProtocolError): talking to peers
(`TransportError`, split by whose fault), this node's disk (`StorageError`) and a
client's request ended at the HTTP edge (`ClientRequestError`), each carrying what the edge
answers. Every exception class of the node has its root, or a reason here not to."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

import dht
from dht.coordination.coordinator import Status
from dht.storage.disk import DiskFull, StorageError
from dht.transport.messages import LocalTransportError, RemoteTransportError, TransportError
from dht.web.admission import BodyTooSlow, ClientRequestError
from dht.web.client_api import STATUS_CODES
from dht.web.server import BadRequest, HttpServer, Params, PayloadTooLarge, Refused, Route, plain

ROOTS = (
    RemoteTransportError,
    LocalTransportError,
    TransportError,
    StorageError,
    ClientRequestError,
)
# Every exception class of the node's packages, by where it is declared, and its root.
HAS_ROOT = {
    "dht.transport.messages.ProtocolError": RemoteTransportError,
    "dht.transport.messages.ChannelMisuse": LocalTransportError,
    "dht.transport.channel.PeerError": RemoteTransportError,
    "dht.transport.channel.ReplicaFull": RemoteTransportError,
    "dht.transport.peer_call.VersionRefused": RemoteTransportError,
    "dht.transport.peers.PeerUnavailable": RemoteTransportError,
    "dht.transport.range_stream.OversizedFrame": RemoteTransportError,
    "dht.transport.tls.TlsSetupError": LocalTransportError,
    "dht.transport.channel_server.ReplicaRefusal": TransportError,
    "dht.storage.disk.DiskFull": StorageError,
    "dht.storage.store.StorageUnavailable": StorageError,
    "dht.web.server.BadRequest": ClientRequestError,
    "dht.web.server.PayloadTooLarge": ClientRequestError,
    "dht.web.server.Refused": ClientRequestError,
    "dht.web.admission.BodyTooSlow": ClientRequestError,
}
# Those left without one, and why.
NO_ROOT = {
    # The pure model's ValueErrors: a value it cannot take, whichever boundary it came
    # through; the layer that meets one says what it means there (BadReplicas becomes
    # BadRequest, VersionAhead a refused record or a failed replica, BadTransition 409).
    "dht.model.clock.VersionAhead": "pure model",
    "dht.model.record.CorruptRecord": "pure model",
    "dht.model.replicas.BadReplicas": "pure model",
    "dht.model.topology.BadTransition": "pure model",
    "dht.model.topology.UnclearChange": "pure model",
    # The cluster-wide range's two ends, raised from an async generator that cannot
    # return an outcome mid-stream; client_api answers them (504, a cut stream).
    "dht.coordination.cluster_range.NotEnoughSources": "coordination outcome",
    "dht.coordination.cluster_range.RangeIncomplete": "coordination outcome",
    # Not errors: control flow inside one module.
    "dht.web.lean_parse.NotLean": "the lean path handing a request to aiohttp",
    "dht.membership.rebalance._StepChanged": "a rebalance restarting for a new step",
    # The operator's tool, not the node: the command says it and exits.
    "dht.membership.driver.ChangeFailed": "the membership driver's failure",
}
# The kit, the test bed and the history are tools around the node, not its boundaries.
AROUND_THE_NODE = (
    "dht.conformance",
    "dht.testbed",
    "dht.history",
    "dht.simulation",
    "dht.__main__",
)


def node_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for module_info in pkgutil.walk_packages(dht.__path__, "dht."):
        if module_info.name.startswith(AROUND_THE_NODE):
            continue
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and value not in ROOTS
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_error_of_the_node_has_its_boundarys_root_or_a_reason_not_to() -> None:
    found = node_exceptions()
    assert sorted(found) == sorted(HAS_ROOT | NO_ROOT)
    for name, root in HAS_ROOT.items():
        assert issubclass(found[name], root), name
    for name in NO_ROOT:
        assert not issubclass(found[name], ROOTS), name


def test_each_root_sits_in_the_lowest_module_of_its_package() -> None:
    """So every module of the package can raise it (none of them is imported there)."""
    for root, package in (
        (TransportError, "transport"),
        (StorageError, "storage"),
        (ClientRequestError, "web"),
    ):
        module = inspect.getsource(importlib.import_module(root.__module__))
        assert f"from dht.{package}." not in module, root.__module__


def test_a_value_error_stays_one() -> None:
    """Those that were ValueErrors are still caught as ValueErrors where they were."""
    found = node_exceptions()
    assert issubclass(found["dht.transport.range_stream.OversizedFrame"], ValueError)


async def test_the_edge_answers_each_client_error_with_the_status_it_carries() -> None:
    errors: list[ClientRequestError] = [
        BadRequest("no id"),
        PayloadTooLarge("over the limit"),
        BodyTooSlow("too slow"),
        Refused(plain(503, "Overloaded", {"Retry-After": "1"})),
    ]
    for error in errors:

        async def failing(
            request: web.BaseRequest, params: Params, error: ClientRequestError = error
        ) -> web.Response:
            raise error

        http = HttpServer({"/v0/x": Route({"GET": failing})}, 10)  # type: ignore[dict-item]
        response = await http.handle(make_mocked_request("GET", "/v0/x?id=k"))
        assert response.status == error.status, type(error).__name__


def test_a_full_disk_carries_what_a_client_write_refused_for_space_is_answered() -> None:
    assert DiskFull.status == STATUS_CODES[Status.INSUFFICIENT_STORAGE] == 507
