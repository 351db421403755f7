"""A real browser, headless Chromium, runs MQTT.js against a node over WebSocket.

The test serves a page (``tests/browser/page.html``) and MQTT.js's browser bundle from its
own HTTP server on loopback. The page connects to the node's ``listener.ws`` listener,
subscribes, publishes three messages (QoS 0, 1, 2) to itself, shows what arrived, and posts
the outcome to the test's server. The test then takes a screenshot of the page through the
DevTools protocol and keeps it as an artefact (``browser.png`` in the test's directory, and
in ``$TERNMQ_ARTIFACTS`` when set).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Message, Request, TextMessage

from tests.support.browser import headless
from tests.support.node import Node, free_port, make_node, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "browser" / "page.html"
BUNDLE = ROOT / "js" / "node_modules" / "mqtt" / "dist" / "mqtt.min.js"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    ws = free_port()
    n = make_node(tmp_path_factory.mktemp("browser"), **{"listener.ws.default": f"127.0.0.1:{ws}"})
    n.ports["ws"] = ws
    n.start()
    yield n
    assert n.stop() == 0, n.output()


@contextlib.contextmanager
def page_server() -> Iterator[tuple[int, queue.Queue[dict[str, Any]]]]:
    results: queue.Queue[dict[str, Any]] = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            files = {"/page.html": (PAGE, "text/html"), "/mqtt.min.js": (BUNDLE, "text/javascript")}
            if path not in files:
                self.send_error(404)
                return
            body, kind = files[path][0].read_bytes(), files[path][1]
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            results.put(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], results
    finally:
        server.shutdown()
        server.server_close()


def screenshot(debug_port: int, path: Path) -> None:
    """The page's picture, through the DevTools protocol (a WebSocket, via wsproto)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{debug_port}/json/list", timeout=10) as r:
        targets = json.loads(r.read())
    page = next(t for t in targets if t.get("type") == "page")
    target = page["webSocketDebuggerUrl"].split(f":{debug_port}", 1)[1]
    ws = WSConnection(ConnectionType.CLIENT)
    with socket.create_connection(("127.0.0.1", debug_port), timeout=20) as sock:
        sock.sendall(ws.send(Request(host=f"127.0.0.1:{debug_port}", target=target)))
        request = {"id": 1, "method": "Page.captureScreenshot", "params": {"format": "png"}}
        text = ""
        while True:
            data = sock.recv(1 << 20)
            assert data, "DevTools closed the connection"
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    sock.sendall(ws.send(Message(data=json.dumps(request))))
                elif isinstance(event, TextMessage):
                    text += event.data
                    if event.message_finished:
                        reply = json.loads(text)
                        text = ""
                        if reply.get("id") == 1:
                            path.write_bytes(base64.b64decode(reply["result"]["data"]))
                            return


def test_mqttjs_in_headless_chromium_over_websocket(node: Node, tmp_path: Path) -> None:
    assert BUNDLE.is_file(), "run: npm ci --prefix tests/js"
    debug_port = free_port()
    with page_server() as (http_port, results):
        ws_url = f"ws://127.0.0.1:{node.ports['ws']}/mqtt"
        url = f"http://127.0.0.1:{http_port}/page.html?url={ws_url}&topic=browser/t"
        proc = subprocess.Popen(
            headless(tmp_path / "profile", "900,600", f"--remote-debugging-port={debug_port}", url),
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "chromium.log", "wb"),  # noqa: SIM115 - closed with the process
            start_new_session=True,
        )
        try:
            outcome = results.get(timeout=90)
            shot = tmp_path / "browser.png"
            wait_for(lambda: _answers(debug_port), 30, what="the DevTools endpoint")
            screenshot(debug_port, shot)
            keep = os.environ.get("TERNMQ_ARTIFACTS")
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, Path(keep) / "browser.png")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert "error" not in outcome, outcome
    got = sorted((m["payload"], m["qos"]) for m in outcome["got"])
    assert got == [
        ("from the browser q0", 0),
        ("from the browser q1", 1),
        ("from the browser q2", 2),
    ]
    assert shot.stat().st_size > 1000 and shot.read_bytes()[:4] == b"\x89PNG"


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/version", timeout=2):
            return True
    except OSError:
        return False
