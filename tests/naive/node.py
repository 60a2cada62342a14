"""A naive node of the v0 API (SPEC.md part one), written the way many course
implementations are: the standard library only, one thread per connection, one file per
key, and a coordinator that forwards each client request to the key's replicas over plain
HTTP and counts the answers.

It stands for someone else's project: it imports nothing from this repository. What it
does NOT do, by design: no read repair, no hinted handoff, no anti-entropy, no retries. A
replica that misses a write never gets it; only quorum reads hide that.

    python tests/naive/node.py --port PORT --data-dir DIR --cluster URL1,URL2,... [--self URL]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import queue
import re
import signal
import struct
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

INTERNAL_HEADER = "X-Naive-Internal"  # marks a coordinator -> replica request
TIMESTAMP_HEADER = "X-Naive-Timestamp"  # the version a replica stores or holds
TOMBSTONE_HEADER = "X-Naive-Tombstone"  # "1" when what a replica holds is a delete
REPLICA_TIMEOUT = 1.0  # seconds a coordinator waits for one replica
MAX_BODY = 32 * 1024 * 1024
MAX_REQUEST_LINE = 256 * 1024
IDLE_TIMEOUT = 10.0  # seconds a connection may stay silent
REPLICAS = re.compile(r"([0-9]+)/([0-9]+)")
# Record file: timestamp (ms), tombstone flag, key length; then the key, then the value.
RECORD_HEAD = struct.Struct(">qBI")
# A request line: method token, target of visible ASCII, version (RFC 9112 3).
REQUEST_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ [\x21-\x7e]+ HTTP/[0-9]\.[0-9]\r?\n")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")

# The internal calls must go straight to the peers, whatever proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ClientGone(Exception):
    """The client closed the connection before sending the whole request."""


def now_ms() -> int:
    return int(time.time() * 1000)


# -- storage: one file per key -------------------------------------------------------------


class Record:
    __slots__ = ("timestamp", "tombstone", "value")

    def __init__(self, timestamp: int, tombstone: bool, value: bytes) -> None:
        self.timestamp = timestamp
        self.tombstone = tombstone
        self.value = value

    def newer_than(self, other: Record | None) -> bool:
        # On a tie the delete wins, as in Cassandra.
        return other is None or (self.timestamp, self.tombstone) > (
            other.timestamp,
            other.tombstone,
        )


class Store:
    def __init__(self, data_dir: str) -> None:
        self.dir = os.path.join(data_dir, "records")
        os.makedirs(self.dir, exist_ok=True)
        self.locks = [threading.Lock() for _ in range(64)]
        for name in os.listdir(self.dir):
            if name.startswith(".tmp"):  # a write cut short by a crash
                os.remove(os.path.join(self.dir, name))

    def path(self, key: bytes) -> str:
        return os.path.join(self.dir, hashlib.sha256(key).hexdigest())

    def lock(self, key: bytes) -> threading.Lock:
        return self.locks[hashlib.sha256(key).digest()[0] % len(self.locks)]

    def get(self, key: bytes) -> Record | None:
        found = self.read_file(self.path(key))
        if found is None or found[0] != key:
            return None
        return found[1]

    def put(self, key: bytes, record: Record) -> None:
        """Stores `record` unless the key already holds a newer one."""
        with self.lock(key):
            current = self.get(key)
            if current is not None and current.newer_than(record):
                return
            head = RECORD_HEAD.pack(record.timestamp, int(record.tombstone), len(key))
            temporary = os.path.join(self.dir, f".tmp-{uuid.uuid4().hex}")
            with open(temporary, "wb") as file:
                file.write(head + key + record.value)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path(key))
            directory = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    def read_file(self, path: str, with_value: bool = True) -> tuple[bytes, Record] | None:
        try:
            with open(path, "rb") as file:
                head = file.read(RECORD_HEAD.size)
                if len(head) < RECORD_HEAD.size:
                    return None
                timestamp, tombstone, key_length = RECORD_HEAD.unpack(head)
                key = file.read(key_length)
                value = file.read() if with_value else b""
        except FileNotFoundError:
            return None
        return key, Record(timestamp, bool(tombstone), value)

    def keys_between(self, start: bytes, end: bytes | None) -> list[bytes]:
        """The live keys in [start, end), sorted: every file is read (a full scan)."""
        keys = []
        for name in os.listdir(self.dir):
            if name.startswith(".tmp"):
                continue
            found = self.read_file(os.path.join(self.dir, name), with_value=False)
            if found is None:
                continue
            key, record = found
            if not record.tombstone and start <= key and (end is None or key < end):
                keys.append(key)
        keys.sort()
        return keys


# -- the cluster -------------------------------------------------------------------------------


class Cluster:
    def __init__(self, urls: list[str], self_url: str, store: Store) -> None:
        self.urls = urls
        self.self_url = self_url
        self.store = store

    def replicas_for(self, key: bytes, count: int) -> list[str]:
        """Rendezvous hashing: the `count` nodes with the highest score for the key."""

        def score(url: str) -> bytes:
            return hashlib.sha256(url.encode() + b"\n" + key).digest()

        return sorted(self.urls, key=score, reverse=True)[:count]

    def coordinate(
        self, method: str, key: bytes, ack: int, count: int, body: bytes
    ) -> tuple[int, bytes]:
        """Sends the request to the key's replicas in parallel and answers once `ack` of
        them did; 504 if they cannot."""
        replicas = self.replicas_for(key, count)
        timestamp = now_ms()
        answers: queue.Queue[tuple[bool, Record | None]] = queue.Queue()
        for url in replicas:
            threading.Thread(
                target=self.call_replica,
                args=(url, method, key, timestamp, body, answers),
                daemon=True,
            ).start()
        successes: list[Record | None] = []
        failures = 0
        deadline = time.monotonic() + REPLICA_TIMEOUT + 0.5
        while len(successes) < ack and len(successes) + failures < len(replicas):
            try:
                ok, record = answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if ok:
                successes.append(record)
            else:
                failures += 1
        if len(successes) < ack:
            return 504, b"Not Enough Replicas"
        if method == "PUT":
            return 201, b"Created"
        if method == "DELETE":
            return 202, b"Accepted"
        newest = None
        for record in successes:
            if record is not None and record.newer_than(newest):
                newest = record
        if newest is None or newest.tombstone:
            return 404, b"Not Found"
        return 200, newest.value

    def call_replica(
        self,
        url: str,
        method: str,
        key: bytes,
        timestamp: int,
        body: bytes,
        answers: queue.Queue[tuple[bool, Record | None]],
    ) -> None:
        try:
            if url == self.self_url:
                answers.put((True, self.local(method, key, timestamp, body)))
            else:
                answers.put((True, self.remote(url, method, key, timestamp, body)))
        except Exception as error:  # a replica down, slow or broken: one failure
            if url == self.self_url:
                log(f"local {method} failed: {error!r}")
            answers.put((False, None))

    def local(self, method: str, key: bytes, timestamp: int, body: bytes) -> Record | None:
        if method == "GET":
            return self.store.get(key)
        self.store.put(key, Record(timestamp, method == "DELETE", body))
        return None

    def remote(
        self, url: str, method: str, key: bytes, timestamp: int, body: bytes
    ) -> Record | None:
        target = f"{url}/v0/entity?id={urllib.parse.quote(key, safe='')}"
        request = urllib.request.Request(
            target,
            data=body if method == "PUT" else None,
            method=method,
            headers={INTERNAL_HEADER: "1", TIMESTAMP_HEADER: str(timestamp)},
        )
        try:
            with OPENER.open(request, timeout=REPLICA_TIMEOUT) as response:
                status, headers, data = response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            status, headers, data = error.code, error.headers, error.read()
        if method == "GET":
            if status == 404 and headers.get(TIMESTAMP_HEADER) is None:
                return None
            if status != 200:
                raise RuntimeError(f"{url} answered {status}")
            timestamp = int(headers[TIMESTAMP_HEADER])
            return Record(timestamp, headers.get(TOMBSTONE_HEADER) == "1", data)
        if status not in (201, 202):
            raise RuntimeError(f"{url} answered {status}")
        return None


# -- HTTP ------------------------------------------------------------------------------------


def first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # http.server's default, HTTP/0.9, makes it answer a request line it cannot parse
    # with a bare HTML page and no status line at all.
    default_request_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT
    cluster: Cluster  # set on the class by main()

    def parse_request(self) -> bool:
        """http.server's parsing, plus the checks it leaves out."""
        if not super().parse_request():
            return False
        problem = None
        if not REQUEST_LINE.fullmatch(self.raw_requestline):
            problem = "Bad request line"
        elif self.headers.defects or any(not HEADER_NAME.fullmatch(n) for n in self.headers):
            problem = "Bad header"
        elif len(self.headers.get_all("Host") or []) > 1:
            problem = "Several Host headers"
        if problem is None:
            return True
        self.request_version = "HTTP/1.1"  # "GET /" is HTTP/0.9 to http.server
        self.send_error(400, problem)
        return False

    def handle_one_request(self) -> None:
        """http.server's, with room in the request line for a key of 10,000 characters
        (up to 12 bytes each once percent-encoded), and every method to dispatch() (which
        answers 405, where http.server answers an unknown method 501)."""
        try:
            self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if len(self.raw_requestline) > MAX_REQUEST_LINE:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            self.dispatch()
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True

    def dispatch(self) -> None:
        try:
            body = self.read_body()
            self.route(body)
        except BadRequest as error:
            self.reply(error.status, str(error).encode(), close=True)
        except (ClientGone, OSError):
            self.close_connection = True
        except Exception as error:
            log(f"{self.command} {self.path[:200]!r}: {error!r}")
            self.reply(500, b"Internal Server Error", close=True)

    def read_body(self) -> bytes:
        encodings = self.headers.get_all("Transfer-Encoding") or []
        lengths = self.headers.get_all("Content-Length") or []
        if encodings:
            if lengths:
                raise BadRequest(400, "Content-Length with Transfer-Encoding")
            if [e.strip().lower() for e in encodings] != ["chunked"]:
                raise BadRequest(400, "Unsupported Transfer-Encoding")
            return self.read_chunked()
        if not lengths:
            return b""
        if len({v.strip() for v in lengths}) != 1 or not re.fullmatch(
            r"[0-9]+", lengths[0].strip()
        ):
            raise BadRequest(400, "Bad Content-Length")
        length = int(lengths[0].strip())
        if length > MAX_BODY:
            raise BadRequest(413, "Body too large")
        body = self.rfile.read(length)
        if len(body) < length:
            raise ClientGone()
        return body

    def read_chunked(self) -> bytes:
        body = bytearray()
        while True:
            line = self.rfile.readline(1024)
            if not line:
                raise ClientGone()
            if not line.endswith(b"\r\n"):
                raise BadRequest(400, "Bad chunk size line")
            size_text = line[:-2].split(b";")[0].strip()
            if not re.fullmatch(rb"[0-9A-Fa-f]+", size_text):
                raise BadRequest(400, "Bad chunk size")
            size = int(size_text, 16)
            if len(body) + size > MAX_BODY:
                raise BadRequest(413, "Body too large")
            if size == 0:
                break
            data = self.rfile.read(size + 2)
            if len(data) < size + 2:
                raise ClientGone()
            if data[size:] != b"\r\n":
                raise BadRequest(400, "Chunk not terminated")
            body += data[:size]
        while True:  # trailers, ignored
            line = self.rfile.readline(65537)
            if not line:
                raise ClientGone()
            if line in (b"\r\n", b"\n"):
                return bytes(body)

    def route(self, body: bytes) -> None:
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        if parts.path == "/v0/status":
            if self.command != "GET":
                raise BadRequest(405, "Method Not Allowed")
            self.reply(200, b"OK")
        elif parts.path == "/v0/entity":
            self.entity(query, body)
        elif parts.path == "/v0/entities":
            if self.command != "GET":
                raise BadRequest(405, "Method Not Allowed")
            self.entities(query)
        else:
            raise BadRequest(400, "Unknown path")

    def entity(self, query: dict[str, list[str]], body: bytes) -> None:
        if self.command not in ("GET", "PUT", "DELETE"):
            raise BadRequest(405, "Method Not Allowed")
        key_text = first(query, "id")
        if not key_text:
            raise BadRequest(400, "id is required")
        key = key_text.encode()
        if self.headers.get(INTERNAL_HEADER):
            self.replica(key, body)
            return
        size = len(self.cluster.urls)
        replicas = first(query, "replicas")
        if replicas is None:
            ack, count = size // 2 + 1, size
        else:
            match = REPLICAS.fullmatch(replicas)
            if match is None:
                raise BadRequest(400, "Bad replicas")
            ack, count = int(match[1]), int(match[2])
            if not 1 <= ack <= count <= size:
                raise BadRequest(400, "Bad replicas")
        status, answer = self.cluster.coordinate(self.command, key, ack, count, body)
        self.reply(status, answer)

    def replica(self, key: bytes, body: bytes) -> None:
        """A coordinator's request: this node's own copy only."""
        store = self.cluster.store
        if self.command == "GET":
            record = store.get(key)
            if record is None:
                self.reply(404, b"Not Found")
                return
            headers = {
                TIMESTAMP_HEADER: str(record.timestamp),
                TOMBSTONE_HEADER: "1" if record.tombstone else "0",
            }
            self.reply(200, record.value, headers=headers)
            return
        try:
            timestamp = int(self.headers.get(TIMESTAMP_HEADER, ""))
        except ValueError:
            raise BadRequest(400, "Bad timestamp") from None
        store.put(key, Record(timestamp, self.command == "DELETE", body))
        self.reply(201 if self.command == "PUT" else 202, b"")

    def entities(self, query: dict[str, list[str]]) -> None:
        start = first(query, "start")
        if not start:
            raise BadRequest(400, "start is required")
        end = first(query, "end") or None
        keys = self.cluster.store.keys_between(
            start.encode(), None if end is None else end.encode()
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for key in keys:
            record = self.cluster.store.get(key)
            if record is None or record.tombstone:  # deleted since the scan
                continue
            chunk = key + b"\n" + record.value
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def reply(
        self, status: int, body: bytes, close: bool = False, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # one line per request is too much; errors are still logged

    def log_message(self, format: str, *args: object) -> None:
        log(format % args)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        log(f"connection from {client_address}: {sys.exc_info()[1]!r}")


def log(message: str) -> None:
    print(f"naive-node: {message}", file=sys.stderr, flush=True)


def find_self(urls: list[str], port: int, given: str | None) -> str:
    if given:
        return given.rstrip("/")
    for url in urls:
        if urllib.parse.urlsplit(url).port == port:
            return url
    raise SystemExit(f"naive-node: no URL with port {port} in --cluster")


def main() -> None:
    parser = argparse.ArgumentParser(description="A naive node of the v0 API.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--cluster", required=True, help="every node's URL, comma-separated")
    parser.add_argument("--self", dest="self_url", help="this node's URL in --cluster")
    args = parser.parse_args()
    urls = [url.strip().rstrip("/") for url in args.cluster.split(",") if url.strip()]
    self_url = find_self(urls, args.port, args.self_url)
    if self_url not in urls:
        raise SystemExit(f"naive-node: {self_url} is not in --cluster")
    Handler.cluster = Cluster(urls, self_url, Store(args.data_dir))
    server = Server(("127.0.0.1", args.port), Handler)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    ).start()
    log(f"serving {self_url} on 127.0.0.1:{args.port}, cluster of {len(urls)}")
    while not stopping.wait(1.0):
        pass
    server.shutdown()
    server.server_close()
    log("stopped")
    sys.exit(0)


if __name__ == "__main__":
    main()
