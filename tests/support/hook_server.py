"""A webhook service of the test's own: a real HTTP server on loopback that records every
call (the ``vernemq-hook`` header and the JSON body) and answers what its subclass's
``answer`` says, with any headers it gives (``cache-control``, …)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[dict[str, Any], dict[str, str]]


class HookServer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hook = self.headers.get("vernemq-hook", "")
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with service.lock:
                    service.calls.append((hook, body))
                answer, headers = service.answer(hook, body)
                raw = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, hook: str, body: dict[str, Any]) -> Answer:
        raise NotImplementedError

    def count(self, hook: str, **match: Any) -> int:
        """Calls of ``hook`` whose body has every ``match`` field."""
        with self.lock:
            return sum(
                1
                for h, b in self.calls
                if h == hook and all(b.get(k) == v for k, v in match.items())
            )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
