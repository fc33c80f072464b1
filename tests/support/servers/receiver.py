"""A webhook receiver process for tests: records every request, answers as told.

    python -m tests.support.servers.receiver --port P --log FILE [--cert PEM --key PEM]

With `--cert` (the certificate chain) and `--key` it speaks https, and records the TLS
server name each request's connection asked for (`sni`).

Every request to any path but `/_mode` is appended to FILE as one JSON line: arrival and
answer times, headers, body, and the status answered. `POST /_mode {"mode": M, "times": N}`
makes the next N requests (all, without `times`) answer by M:

    ok      200
    fail    500
    hang    no answer: the sender's timeout fires first, unless `POST /_release` comes
            before it, which closes every hung connection unanswered (so that a worker
            stopped at the test's end is not held by attempts waiting on their timeout)
    die     the process exits at once, the request unanswered (mid-request)
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class State:
    def __init__(self, log: Path):
        self.log = log
        self.lock = threading.Lock()
        self.rules: list[str] = []
        self.default = "ok"
        self.release = threading.Event()

    def next_mode(self) -> str:
        with self.lock:
            return self.rules.pop(0) if self.rules else self.default

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record) + "\n"
        with self.lock, self.log.open("a") as out:
            out.write(line)


def handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            if self.path == "/_mode":
                self._control(json.loads(body or b"{}"))
                return
            if self.path == "/_release":
                state.release.set()
                self._answer(200)
                return
            arrived = time.time()
            mode = state.next_mode()
            record = {
                "arrived": arrived,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode(),
                "mode": mode,
                "sni": getattr(self.connection, "sni", None),
            }
            if mode == "die":
                state.write({**record, "status": None})
                os._exit(3)
            if mode == "hang":
                state.write({**record, "status": None, "answered": None})
                state.release.wait()
                self.close_connection = True
                return
            status = 200 if mode == "ok" else 500
            state.write({**record, "status": status, "answered": time.time()})
            self._answer(status)

        def _control(self, rule: dict[str, Any]) -> None:
            with state.lock:
                if "times" in rule:
                    state.rules.extend([rule["mode"]] * int(rule["times"]))
                else:
                    state.default = rule["mode"]
                    state.rules.clear()
            self._answer(200)

        def do_GET(self) -> None:
            self._answer(200)

        def _answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--cert", type=Path)
    parser.add_argument("--key", type=Path)
    args = parser.parse_args()
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(State(args.log)))
    server.daemon_threads = True
    if args.cert is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)

        def remember_sni(sock: Any, name: str | None, _: ssl.SSLContext) -> None:
            sock.sni = name

        context.sni_callback = remember_sni
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
