"""The tests' HTTP client: one request on a fresh connection, the answer as it came
(parsed, or raw with its transfer framing), assertions that say what came back, and a
node's metrics page read into samples."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

from dht.testbed.toxiproxy import free_ports

T = TypeVar("T")

HOST = "127.0.0.1"


def free_port() -> int:
    return free_ports(1)[0]


def excerpt(data: bytes, limit: int = 60) -> str:
    """Bytes as a report shows them: their start, and their size when cut."""
    shown = repr(data[:limit])
    return shown if len(data) <= limit else f"{shown}... ({len(data)} bytes)"


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str]
    seconds: float = 0.0  # from sending the request to the end of the answer

    def __repr__(self) -> str:
        return f"<{self.status} {excerpt(self.body)} after {self.seconds * 1000:.0f} ms>"

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def header(self, name: str) -> str | None:
        """A header by its case-insensitive name."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


def request(
    method: str,
    url: str,
    body: bytes | None = None,
    timeout: float = 10.0,
    headers: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Response:
    """One HTTP request on a fresh connection (HTTPS with `tls`); raises OSError if
    nothing answers, or if the answer is cut off (a node killed while it answered: what
    it did is as unknown as if it had not answered at all)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or HOST
    connection = (
        http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=tls)
        if tls is not None
        else http.client.HTTPConnection(host, parts.port, timeout=timeout)
    )
    started = time.monotonic()
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        body = response.read()
        elapsed = time.monotonic() - started
        return Response(response.status, body, dict(response.getheaders()), elapsed)
    except http.client.HTTPException as exc:  # IncompleteRead, a broken status line
        raise ConnectionError(f"the answer was cut off: {exc!r}") from exc
    finally:
        connection.close()


def expect(
    response: Response | RawResponse, status: int, body: bytes | None = None, context: str = ""
) -> None:
    """Asserts an answer's status (and body), failing with what was expected and what
    came back, as the conformance report shows it: `expected 200 b'v', got <404 ...>`."""
    if response.status == status and (body is None or response.body == body):
        return
    wanted = f"{status}" if body is None else f"{status} {excerpt(body)}"
    raise AssertionError(f"{context + ': ' if context else ''}expected {wanted}, got {response!r}")


def wait_for(probe: Callable[[], T], done: Callable[[T], bool], deadline: float = 5.0) -> T:
    """Calls `probe` until `done` holds for its result and returns that result; raises
    TimeoutError naming the last result when `deadline` seconds pass first."""
    started = time.monotonic()
    while True:
        result = probe()
        if done(result):
            return result
        if time.monotonic() - started > deadline:
            raise TimeoutError(f"still {result!r} after {deadline}s")
        time.sleep(0.02)


def status_code(base: str, timeout: float = 1.0) -> int | None:
    """What `GET /v0/status` of the node at `base` answers, or None when nothing does."""
    try:
        return request("GET", base + "/v0/status", timeout=timeout).status
    except OSError:
        return None


def entity_url(base: str, key: str, replicas: str | None = None) -> str:
    query = {"id": key}
    if replicas is not None:
        query["replicas"] = replicas
    return f"{base}/v0/entity?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


def entities_url(base: str, start: str, end: str | None = None) -> str:
    query = {"start": start} | ({} if end is None else {"end": end})
    return f"{base}/v0/entities?{urllib.parse.urlencode(query, quote_via=urllib.parse.quote)}"


@dataclass
class RawResponse:
    """A response as it came off the socket: `body` keeps its transfer framing, which
    http.client would strip, so a test can see how a stream was cut into chunks."""

    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes

    @property
    def chunks(self) -> list[bytes]:
        """The chunks of a `Transfer-Encoding: chunked` body, in order, without the final
        empty one; raises ValueError if the framing is broken or the body is cut short."""
        chunks: list[bytes] = []
        position = 0
        while True:
            line_end = self.body.find(b"\r\n", position)
            if line_end < 0:
                raise ValueError(f"no chunk-size line at byte {position}")
            size = int(self.body[position:line_end].split(b";")[0], 16)
            start, end = line_end + 2, line_end + 2 + size
            if size == 0:
                if self.body[start:] != b"\r\n":
                    raise ValueError(f"bytes after the last chunk: {self.body[start:]!r}")
                return chunks
            if len(self.body) < end + 2 or self.body[end : end + 2] != b"\r\n":
                raise ValueError(f"chunk at byte {position} is cut short or not terminated")
            chunks.append(self.body[start:end])
            position = end + 2


def raw_get(url: str, timeout: float = 10.0) -> RawResponse:
    """GET over a bare socket (HTTP/1.1, Connection: close), read to EOF and unparsed."""
    parts = urllib.parse.urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    head = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(head.encode("ascii"))
        raw = b"".join(iter(lambda: sock.recv(65536), b""))
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head_bytes.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in header_lines)
    }
    return RawResponse(int(status_line.split()[1]), headers, body)


class Metrics:
    """Samples of a Prometheus text page: `metrics["dht_read_repairs_total"]`, or with
    labels `metrics.value("dht_hints_pending", peer=url)`; 0.0 for a sample not there."""

    def __init__(self, samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> None:
        self.samples = samples

    @classmethod
    def parse(cls, page: str) -> Metrics:
        samples = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(page)
            for sample in family.samples
        }
        return cls(samples)

    def value(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(
            value
            for (sample, sample_labels), value in self.samples.items()
            if sample == name and wanted <= sample_labels
        )

    def __getitem__(self, name: str) -> float:
        return self.value(name)

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}
