"""A stub HTTP server in place of a worker, for tests of what a client process prints: it
answers each GET with the JSON its `views` give for the path (query left out), or 404."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

# The body for a path, or None for 404.
Views = Callable[[str], Any]


@contextmanager
def stub_worker(views: Views) -> Iterator[int]:
    """Serve `views` on a free loopback port (yielded) until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = views(self.path.split("?")[0])
            body = json.dumps(found if found is not None else {"error": "not found"}).encode()
            self.send_response(200 if found is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
