"""A node that knows nothing of proxies, for chaos/test_netns.py: `python plain_node.py
INDEX PORT` serves on 127.0.0.1:PORT only. GET / answers `node INDEX`; GET /fetch?url=U
fetches U (2 s deadline) and answers `ok STATUS SECONDS BODY`, or 502 with the error,
so a test can make one node dial another as any implementation of the API would."""

import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

INDEX, PORT = sys.argv[1], int(sys.argv[2])


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/fetch":
            url = parse_qs(parts.query)["url"][0]
            started = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=2.0) as answer:
                    body = answer.read().decode()
                    text = f"ok {answer.status} {time.monotonic() - started:.3f} {body}"
                status = 200
            except OSError as exc:
                text, status = f"error {exc}", 502
        else:
            text, status = f"node {INDEX}", 200
        payload = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
