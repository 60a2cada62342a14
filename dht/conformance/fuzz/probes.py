"""Hypothesis strategies for raw requests to the client API, each labelled with what the
node owes the sender (dht/conformance/fuzz/exchange.py: Expect).

Well-formed requests vary everything the node parses (method, path, query, percent-
encodings, `replicas`, headers, body framing) while staying valid HTTP/1.1, so any drop
is the node's fault. Malformed ones break one thing at a time, so a failure names the
thing. What counts as malformed follows RFC 9112: an invalid Content-Length, a
Transfer-Encoding whose last coding is not chunked, or two Host headers must be
rejected; obs-fold, NUL in a value or raw bytes in the target may be rejected or read
leniently.

A leading 0x00 byte is never sent: on the node's port it opens a replica channel
(dht/web/listener.py), which is not the client API and is not fuzzed here.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from dht.conformance.fuzz.exchange import Expect, Probe

DIGITS_AND_LETTERS = string.digits + string.ascii_letters
TCHAR = "!#$%&'*+-.^_`|~" + DIGITS_AND_LETTERS  # a method or header name (RFC 9110 5.6.2)
UNRESERVED = DIGITS_AND_LETTERS + "-._~"
# Characters a query may carry raw, less the ones with a meaning here (& = + %).
QUERY_CHARS = UNRESERVED + "!$'()*,;:@/?"
PATH_CHARS = UNRESERVED + "!$&'()*+,;=:@/"
VCHAR = "".join(chr(c) for c in range(0x21, 0x7F))

KNOWN_METHODS = ["GET", "PUT", "DELETE", "POST", "HEAD", "OPTIONS", "PATCH", "TRACE"]
ODD_PATHS = [
    "/",
    "/v0",
    "/v0/",
    "/v0/entity/",
    "/v0/entities/x",
    "/V0/STATUS",
    "/v0/%65ntity",
    "//v0/status",
    "/v0/status/..",
    "/v0/./entity",
    "/v0/entity;id=a",
    "/internal/v0/record",  # the old replica path: gone, so an unknown path now
    "http://127.0.0.1/v0/status",  # absolute-form
]
PARAM_NAMES = ["id", "start", "end", "replicas", "ID", "%69d", "i%64", "id%00", "", "id[]"]
ROUTES = {
    "/v0/entity": ["GET", "PUT", "DELETE"],
    "/v0/entities": ["GET"],
    "/v0/status": ["GET"],
    "/internal/v0/records": ["GET"],
}
GOOD_REPLICAS = ["1/1", "1/1", "1/2", "2/2", "1/3", "2/3", "3/3"]  # past a lone node: 400
ODD_REPLICAS = [
    "0/1", "1/0", "0/0", "2/1", "4/4", "4/3", "-1/1", "1/", "/1", "/", "", "1", "a/b",
    "1/1/1", "+1/1", "1%2F1", "%31/%31", "01/01", "999999999/999999999", "9999999999/1",
    "1.0/1", "%EF%BC%91/%EF%BC%91", "1/1%00",
]  # fmt: skip
PERCENT_ODDITIES = [
    "%00", "%FF", "%fe", "%EF%BF%BD", "%C3%A9", "%C3", "%80", "%2B", "%26", "%3D",
    "%25", "%20", "%0A", "%0D%0A", "%F0%9F%94%91", "%ED%A0%80",  # valid escapes
    "%G1", "%", "%1", "%%", "%zz", "%-1", "%+1", "%%41",  # invalid or truncated
    "+", "&", "=", "&&",
]  # fmt: skip
HEADER_NAMES = [
    "User-Agent", "Accept", "X-Fuzz", "Content-Type", "Accept-Encoding", "Cookie",
    "X-Dht-Proof", "X-Dht-Ring", "Expect", "Upgrade", "Connection", "Keep-Alive",
]  # fmt: skip
HEADER_VALUES = {
    "Connection": ["close", "keep-alive", "Upgrade", "junk", "close, keep-alive"],
    "Expect": ["100-continue", "junk"],
    "Upgrade": ["websocket", "h2c", "junk"],
}
# Past aiohttp's default limits (8190 bytes a line, 128 headers), far past any common one.
OVERSIZED = st.integers(min_value=9_000, max_value=70_000)


@dataclass(frozen=True)
class Parts:
    """A request before it is put on the wire, so one part can be broken at a time."""

    method: bytes
    target: bytes
    version: bytes
    header_lines: tuple[bytes, ...]
    body: bytes  # as framed on the wire

    def wire(self) -> bytes:
        request_line = self.method + b" " + self.target + b" " + self.version
        return b"\r\n".join((request_line, *self.header_lines, b"", self.body))

    def with_headers(self, *lines: bytes) -> Parts:
        return replace(self, header_lines=self.header_lines + lines)


def header(name: str, value: str | bytes) -> bytes:
    return name.encode() + b": " + (value if isinstance(value, bytes) else value.encode())


# -- queries ---------------------------------------------------------------------------


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True once in `n` draws, shrinking to False: a rare feature, not a coin flip
    (hypothesis draws small integers, so `integers(0, n) == 0` is far likelier)."""
    return st.sampled_from([False] * (n - 1) + [True])


query_piece = st.one_of(
    st.text(alphabet=QUERY_CHARS, min_size=1, max_size=8),
    st.sampled_from(PERCENT_ODDITIES),
    st.integers(min_value=0, max_value=255).map(lambda byte: f"%{byte:02X}"),
)
query_value = st.lists(query_piece, max_size=6).map("".join)
replicas_value = st.sampled_from(["good", "good", "odd", "any"]).flatmap(
    lambda pick: {
        "good": st.sampled_from(GOOD_REPLICAS),
        "odd": st.sampled_from(ODD_REPLICAS),
        "any": query_value,
    }[pick]
)
param_name = st.one_of(st.sampled_from(PARAM_NAMES), st.text(alphabet=QUERY_CHARS, max_size=6))


@st.composite
def query_param(draw: st.DrawFn) -> str:
    name = draw(param_name)
    if draw(st.booleans()) and name == "":
        return ""  # an empty pair: `a=1&&b=2`
    value = draw(replicas_value if name == "replicas" else query_value)
    return name if draw(one_in(10)) else f"{name}={value}"  # sometimes no `=`


query = st.lists(query_param(), max_size=4).map("&".join)
api_value = st.lists(query_piece, min_size=1, max_size=6).map("".join)


@st.composite
def api_query(draw: st.DrawFn) -> str:
    """The parameters the API reads, each there or not, in any order, among junk ones:
    most of these reach the coordinator rather than stop at a missing `id`."""
    params = []
    for name, rarely_missing in (("id", 8), ("start", 2), ("end", 2), ("replicas", 2)):
        if not draw(one_in(rarely_missing)):
            chosen = replicas_value if name == "replicas" else api_value | query_value
            params.append(f"{name}={draw(chosen)}")
    params += draw(st.lists(query_param(), max_size=2))
    return "&".join(draw(st.permutations(params)))


@st.composite
def target(draw: st.DrawFn) -> str:
    """An origin-form target (or absolute-form) of visible ASCII only: valid HTTP even
    when its percent-encodings are not valid URI escapes."""
    if not draw(one_in(4)):
        path = draw(st.sampled_from(["/v0/entity", *ROUTES]))  # entities twice as often
        return f"{path}?{draw(api_query())}"
    path = draw(
        st.sampled_from(ODD_PATHS)
        | st.text(alphabet=PATH_CHARS, max_size=12).map(lambda text: "/" + text)
    )
    if draw(one_in(6)):
        return path  # no query at all
    return f"{path}?{draw(query)}"


# -- well-formed requests ----------------------------------------------------------------


@st.composite
def header_value(draw: st.DrawFn, name: str) -> bytes:
    """A valid field value: visible ASCII, inner spaces and tabs, obs-text (0x80-0xFF)."""
    if name in HEADER_VALUES and draw(st.booleans()):
        return draw(st.sampled_from(HEADER_VALUES[name])).encode()
    inner = draw(st.text(alphabet=VCHAR + " \t", max_size=30)).strip(" \t").encode()
    obs_text = draw(st.binary(max_size=3).map(lambda raw: bytes(b | 0x80 for b in raw)))
    return inner + obs_text


@st.composite
def extra_headers(draw: st.DrawFn) -> list[bytes]:
    names = draw(st.lists(st.sampled_from(HEADER_NAMES), max_size=4))
    return [header(name, draw(header_value(name))) for name in names]


@st.composite
def chunked(draw: st.DrawFn, body: bytes) -> bytes:
    """`body` in a valid chunked coding: random cuts, hex in either case with leading
    zeros, chunk extensions, trailers."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=4)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    framed = bytearray()
    for piece in (p for p in pieces if p):
        size = f"{len(piece):x}"
        size = size.upper() if draw(st.booleans()) else size
        size = "0" * draw(st.integers(0, 2)) + size
        extension = draw(st.sampled_from(["", ";x=1", ';name="quoted"', ";flag"]))
        framed += f"{size}{extension}\r\n".encode() + piece + b"\r\n"
    trailer = draw(st.sampled_from([b"", b"X-Trailer: 1\r\n"]))
    return bytes(framed) + b"0\r\n" + trailer + b"\r\n"


FRAMINGS = ("no-body", "content-length", "chunked", "extra-bytes")


@st.composite
def well_formed(draw: st.DrawFn, framings: tuple[str, ...] = FRAMINGS) -> tuple[str, Parts, bytes]:
    """A valid HTTP/1.x request, the label of its most unusual feature, and the bytes
    sent after it on the same connection (with the "extra-bytes" framing)."""
    request_target = draw(target())
    fitting = ROUTES.get(request_target.partition("?")[0], KNOWN_METHODS)
    pick = draw(st.sampled_from(["fitting"] * 6 + ["known", "junk"]))
    junk_method = pick == "junk"
    method = draw(
        st.text(alphabet=TCHAR, min_size=1, max_size=10)
        if junk_method
        else st.sampled_from(fitting if pick == "fitting" else KNOWN_METHODS)
    )
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]))
    lines = [] if version == "HTTP/1.0" else [header("Host", "127.0.0.1")]
    lines += draw(extra_headers())
    duplicated = bool(lines) and draw(one_in(6)) and lines[-1][:5] != b"Host:"
    if duplicated:
        lines.append(lines[-1])
    value = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(framings))
    body = after = b""
    if framing == "content-length":
        lines.append(header("Content-Length", str(len(value))))
        body = value
    elif framing == "chunked":
        lines.append(header("Transfer-Encoding", draw(st.sampled_from(["chunked", "Chunked"]))))
        body = draw(chunked(value))
    elif framing == "extra-bytes":  # Content-Length shorter than what follows
        length = draw(st.integers(0, len(value)))
        lines.append(header("Content-Length", str(length)))
        body = value[:length]
        after = value[length:] + draw(st.binary(min_size=1, max_size=20))
    order = draw(st.permutations(lines))
    parts = Parts(method.encode(), request_target.encode(), version.encode(), tuple(order), body)
    kind = "junk-method" if junk_method else "duplicate-header" if duplicated else framing
    return kind, parts, after


@st.composite
def valid_request(draw: st.DrawFn, framings: tuple[str, ...] = FRAMINGS) -> Probe:
    kind, parts, after = draw(well_formed(framings))
    alone = parts.wire() if after else None
    head = parts.method == b"HEAD"
    return Probe(kind, parts.wire() + after, Expect.ANSWER, head_method=head, alone=alone)


# -- malformed heads: rejected or closed, the node has every byte it needs ----------------

BAD_METHODS = [b"GE T", b"GET\x00", b"G(ET", "ПОСТ".encode(), b"", b"GET\t", b"\x7fGET"]
BAD_VERSIONS = [b"HTTP/1.x", b"HTTP/11", b"HTTX/1.1", b"http/1.1", b"HTTP/1.1 x", b"HTTP/"]
BAD_TARGET_BYTES = [b" ", b"\x01", b"\x7f", b"\x00", b"\t"]
BAD_HEADER_LINES = [
    b"X-Fuzz",  # no colon
    b"Host : 127.0.0.1",  # whitespace before the colon (RFC 9112 5.1: MUST 400)
    b"X(Y): 1",
    b": empty-name",
    "Ключ: 1".encode(),
    b"X-Fuzz\x00: 1",
]
BAD_CONTENT_LENGTHS = [
    "-1", "abc", "1 2", "0x10", "+5", "", "1.5", "5, 6", "1e3", "\u0665",
    "99999999999999999999999999",  # past 2^64
]  # fmt: skip


@st.composite
def malformed_head(draw: st.DrawFn) -> Probe:
    """A valid request with one part of its head broken."""
    _, parts, _ = draw(well_formed(FRAMINGS[:3]))
    fault = draw(
        st.sampled_from(["bad-method", "bad-target", "bad-version", "bad-header", "duplicate-host"])
    )
    if fault == "bad-method":
        parts = replace(parts, method=draw(st.sampled_from(BAD_METHODS)))
    elif fault == "bad-target":  # inside it: whitespace around it may be read as SP
        whole = parts.target if len(parts.target) > 1 else parts.target + b"x"
        at = draw(st.integers(1, len(whole) - 1))
        bad = draw(st.sampled_from(BAD_TARGET_BYTES))
        parts = replace(parts, target=whole[:at] + bad + whole[at:])
    elif fault == "bad-version":
        parts = replace(parts, version=draw(st.sampled_from(BAD_VERSIONS)))
    elif fault == "bad-header":
        parts = parts.with_headers(draw(st.sampled_from(BAD_HEADER_LINES)))
    else:
        parts = parts.with_headers(header("Host", "example.com"), header("Host", "other.org"))
    return Probe(fault, parts.wire(), Expect.REJECTION)


@st.composite
def malformed_framing(draw: st.DrawFn) -> Probe:
    """A head whose body framing is invalid, or a chunked body with a bad chunk: the
    node can tell from the bytes sent, so it must reject or close, never wait."""
    parts = Parts(
        draw(st.sampled_from(["PUT", "GET", "POST", "DELETE"])).encode(),
        draw(target()).encode(),
        b"HTTP/1.1",
        (header("Host", "127.0.0.1"),),
        b"",
    )
    fault = draw(
        st.sampled_from(["bad-content-length", "conflicting-lengths", "bad-te", "bad-chunk"])
    )
    if fault == "bad-content-length":
        parts = parts.with_headers(
            header("Content-Length", draw(st.sampled_from(BAD_CONTENT_LENGTHS)))
        )
    elif fault == "conflicting-lengths":
        length = draw(st.integers(0, 9))
        parts = parts.with_headers(
            header("Content-Length", str(length)), header("Content-Length", str(length + 1))
        )
        parts = replace(parts, body=b"x" * (length + 1))
    elif fault == "bad-te":  # chunked is not the final coding (RFC 9112 6.3: MUST 400)
        coding = draw(
            st.sampled_from(["gzip", "chunked, gzip", "identity", "junk", "chunked, chunked"])
        )
        parts = parts.with_headers(header("Transfer-Encoding", coding))
        parts = replace(parts, body=b"3\r\nabc\r\n0\r\n\r\n")
    else:
        size = draw(st.sampled_from([b"zz", b"-1", b"", b"0x3", b"1" + b"0" * 20, b"3 3", b"\x00"]))
        longer = draw(st.booleans())
        chunk = b"3\r\nabcdef\r\n" if longer else size + b"\r\nabc\r\n"  # data past its size
        parts = parts.with_headers(header("Transfer-Encoding", "chunked"))
        parts = replace(parts, body=chunk + b"0\r\n\r\n")
    return Probe(fault, parts.wire(), Expect.REJECTION)


# -- leniency allowed: any permitted status or a close ----------------------------------------


LENIENT_FAULTS = [
    "obs-fold", "nul-in-value", "raw-byte-target", "length-and-chunked",
    "oversized-header", "oversized-target", "many-headers",
]  # fmt: skip


@st.composite
def lenient(draw: st.DrawFn) -> Probe:
    """Requests a server may reject or read leniently (RFC 9112 lets it replace NUL or an
    obs-fold with a space, and either honour Transfer-Encoding over Content-Length or
    reject both), and requests over a size limit (which a server may also close on)."""
    _, parts, _ = draw(well_formed(("no-body",)))
    fault = draw(st.sampled_from(LENIENT_FAULTS))
    if fault == "obs-fold":
        parts = parts.with_headers(b"X-Fuzz: first\r\n  folded")
    elif fault == "nul-in-value":
        parts = parts.with_headers(draw(st.sampled_from([b"X-Fuzz: a\x00b", b"X-Fuzz: a\rb"])))
    elif fault == "raw-byte-target":  # non-ASCII, often not UTF-8, unescaped in the query
        raw = draw(st.binary(min_size=1, max_size=6).map(lambda b: bytes(x | 0x80 for x in b)))
        parts = replace(parts, target=b"/v0/entity?id=" + raw)
    elif fault == "length-and-chunked":
        parts = parts.with_headers(
            header("Content-Length", "3"), header("Transfer-Encoding", "chunked")
        )
        parts = replace(parts, body=b"3\r\nabc\r\n0\r\n\r\n")
    elif fault == "oversized-header":
        parts = parts.with_headers(header("X-Fuzz", b"a" * draw(OVERSIZED)))
    elif fault == "oversized-target":
        parts = replace(parts, target=b"/v0/entity?id=" + b"k" * draw(OVERSIZED))
    else:
        count = draw(st.integers(129, 2_000))
        parts = parts.with_headers(*(header(f"X-Fuzz-{i}", "1") for i in range(count)))
    return Probe(fault, parts.wire(), Expect.ANY, head_method=parts.method == b"HEAD")


# -- cut short: the node may wait for more, so we half-close -------------------------------


@st.composite
def cut_short(draw: st.DrawFn) -> Probe:
    fault = draw(
        st.sampled_from(
            ["short-body", "huge-content-length", "truncated-chunked", "truncated-head"]
        )
    )
    _, parts, _ = draw(well_formed(("no-body",)))
    parts = replace(parts, method=draw(st.sampled_from([b"PUT", b"GET", b"POST"])))
    if fault == "short-body":
        body = draw(st.binary(max_size=100))
        extra = draw(st.integers(1, 10_000))
        parts = replace(
            parts.with_headers(header("Content-Length", str(len(body) + extra))), body=body
        )
    elif fault == "huge-content-length":
        length = 10 ** draw(st.integers(8, 30))
        body = draw(st.binary(max_size=100))
        parts = replace(parts.with_headers(header("Content-Length", str(length))), body=body)
    elif fault == "truncated-chunked":
        framed = draw(chunked(draw(st.binary(min_size=1, max_size=100))))
        cut = draw(st.integers(0, len(framed) - 3))  # before the final CRLF at least
        parts = replace(
            parts.with_headers(header("Transfer-Encoding", "chunked")), body=framed[:cut]
        )
    wire = parts.wire()
    if fault == "truncated-head":
        head_end = wire.index(b"\r\n\r\n")
        wire = wire[: draw(st.integers(1, head_end + 3))]
    return Probe(fault, wire, Expect.ANY, cut_short=True)


random_bytes = (
    st.binary(min_size=1, max_size=512)
    .filter(lambda data: not data.startswith(b"\x00"))
    .map(lambda data: Probe("random-bytes", data, Expect.ANY, cut_short=True))
)


def probes() -> st.SearchStrategy[Probe]:
    """Every kind of raw request, well-formed ones half of the time."""
    malformed = [malformed_head(), malformed_framing(), lenient(), cut_short(), random_bytes]
    return st.sampled_from([valid_request()] * len(malformed) + malformed).flatmap(lambda s: s)


@dataclass(frozen=True)
class Family:
    """Probes fuzzed as one hypothesis run, so that a bug found in one family does not
    stop the search in the others (hypothesis stops generating at its first failure)."""

    name: str
    strategy: st.SearchStrategy[Probe]
    share: float  # of the budgeted requests


FAMILIES = [
    Family("well-formed", valid_request(FRAMINGS[:3]), 0.45),
    Family("pipelined", valid_request(("extra-bytes",)), 0.1),
    Family("malformed", malformed_head() | malformed_framing(), 0.2),
    Family("lenient", lenient(), 0.1),
    Family("cut-short", cut_short() | random_bytes, 0.15),
]
