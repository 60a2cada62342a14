"""Who the cockpit acts for: whoever holds its token, as a Jupyter notebook server does.

The cockpit relays kill, wipe and link faults with the cluster's own control token, so
it must not serve anyone who merely reaches its port (another user of the machine, or
the network with --host 0.0.0.0). Every request, GETs included (status, metrics and the
timeline say things, and Toxiproxy's API takes GETs), proves it holds the cockpit's
random token in one of three ways: the cookie a visit to the printed URL
(`http://HOST:PORT/?token=TOKEN`) sets, `Authorization: Bearer TOKEN`, or `?token=TOKEN`.
Anything else is refused with 403 and one line saying which URL to open.

The token only says who asks, not which page: a change (POST, DELETE) also needs the
header X-Cockpit: 1 and a Host naming this server, which a page elsewhere on the web
cannot send (no CORS preflight is granted) or spoof (DNS rebinding), whoever's browser
it runs in.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web
from yarl import URL

# How `cluster` hands its cockpit the token: the environment, which other users cannot
# read (/proc/PID/environ is the owner's), unlike the argv of the process list.
TOKEN_ENVIRONMENT = "DHT_COCKPIT_TOKEN"
TOKEN_QUERY = "token"
# The header the page sends with every change. Another web page cannot set it on a
# cross-origin request without a CORS preflight, which this server never grants.
ACTION_HEADER = "X-Cockpit"
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    """192 random bits, URL-safe: what a printed URL can carry as is."""
    return secrets.token_urlsafe(24)


def page_url(host: str, port: int, token: str) -> str:
    """The URL to open: the page, with the token that lets the browser in."""
    return f"http://{host}:{port}/?{TOKEN_QUERY}={token}"


def cookie_name(port: int) -> str:
    """Cookies are per host, not per port: two cockpits on one machine (a cluster's and
    one of its own) each keep their own cookie."""
    return f"dht-cockpit-{port}"


class CockpitAccess:
    """The token check of every request (`middleware`) and the page-only check of a
    change (`check_action`), for a cockpit serving on `host`:`port`."""

    def __init__(self, host: str, port: int, token: str) -> None:
        if not token:
            raise ValueError("the cockpit needs a token")
        self.host = host
        self.port = port
        self._token = token.encode()

    def _holds(self, offered: str | None) -> bool:
        if offered is None:
            return False
        return hmac.compare_digest(offered.encode(errors="replace"), self._token)

    def _offered(self, request: web.Request) -> list[str | None]:
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        bearer = credentials.strip() if scheme.lower() == "bearer" else None
        return [
            request.query.get(TOKEN_QUERY),
            bearer,
            request.cookies.get(cookie_name(self.port)),
        ]

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuses a request without the token; a visit to the page with it in the URL
        gets the cookie and is sent to the bare URL, so the token leaves the address
        bar (and what is copied from it)."""
        if not any(self._holds(offered) for offered in self._offered(request)):
            raise web.HTTPForbidden(
                text="the cockpit acts only for whoever holds its token: open the URL with "
                "?token= that `python -m dht cluster` (or `cockpit`) printed, or send "
                "Authorization: Bearer TOKEN\n",
                headers={"Cache-Control": "no-store"},
            )
        if (
            request.method == "GET"
            and request.path == "/"
            and self._holds(request.query.get(TOKEN_QUERY))
        ):
            bare = request.rel_url.without_query_params(TOKEN_QUERY)
            redirect = web.HTTPSeeOther(location=str(bare), headers={"Cache-Control": "no-store"})
            redirect.set_cookie(
                cookie_name(self.port),
                self._token.decode(),
                path="/",
                httponly=True,
                samesite="Strict",
            )
            raise redirect
        return await handler(request)

    def check_action(self, request: web.Request) -> None:
        """A change is made only by the page: it sends ACTION_HEADER, which another web
        page cannot without a CORS preflight, and a Host naming this server."""
        if not self.names_this_server(request):
            raise web.HTTPForbidden(
                text=f"the cockpit takes changes from {self.host} only, "
                f"not from Host {request.host}\n"
            )
        if request.headers.get(ACTION_HEADER) != "1":
            raise web.HTTPForbidden(
                text=f"a change needs the header {ACTION_HEADER}: 1 (the cockpit page "
                "sends it), so that other web pages cannot make one\n"
            )

    def names_this_server(self, request: web.Request) -> bool:
        """Whether the Host header names this server. A DNS-rebinding page would send its
        own host name, and gets nothing: on a wildcard address, the Host must be an IP
        address (no name to rebind), a loopback name or this machine's name."""
        try:
            hostname = (URL(f"http://{request.host}").host or "").strip("[]")
        except ValueError:  # a Host header that is no host at all
            return False
        if self.host in _WILDCARD_HOSTS:
            try:
                ipaddress.ip_address(hostname)
                return True
            except ValueError:
                return hostname in _LOOPBACK_NAMES | {socket.gethostname(), socket.getfqdn()}
        return hostname in _LOOPBACK_NAMES | {self.host}
