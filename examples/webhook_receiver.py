"""A webhook consumer that applies each event exactly once, on SQLite (stdlib only).

    python examples/webhook_receiver.py --port 8200 --db inbox.sqlite3 --secret whsec_...

Webhooks arrive at least once: a worker that crashed after your server answered sends the
event again, with the same id. The recipe: verify the signature, then in ONE transaction
of your own database record the event id in an inbox table (its primary key refuses a
second copy) and apply the event's effect. A duplicate finds its id already there and
changes nothing; it is still answered 2xx, so it is not sent again. Answer non-2xx only
when you did not commit: the event then comes back later.

Here the "effect" is a row per payment with its last known status in `payments_seen`
(and a count of effects applied, so a test can check there was exactly one per event).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client.webhooks import WebhookVerificationError, verify_webhook

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    event_id TEXT PRIMARY KEY,
    type TEXT NOT NULL,
    received_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE IF NOT EXISTS payments_seen (
    payment_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    effects INTEGER NOT NULL DEFAULT 0
);
"""


def apply_once(db_path: Path, event: dict[str, Any]) -> bool:
    """Apply the event in one transaction with its inbox row; False if it was a duplicate."""
    conn = sqlite3.connect(db_path, timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        inserted = conn.execute(
            "INSERT INTO inbox (event_id, type) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (event["id"], event["type"]),
        ).rowcount
        if inserted:
            payment = event["data"]
            conn.execute(
                "INSERT INTO payments_seen (payment_id, status, effects) VALUES (?, ?, 1) "
                "ON CONFLICT (payment_id) DO UPDATE "
                "SET status = excluded.status, effects = effects + 1",
                (payment["payment_id"], payment["status"]),
            )
        conn.execute("COMMIT")
        return bool(inserted)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


def make_handler(db_path: Path, secrets: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {name: value for name, value in self.headers.items()}
            event = None
            for secret in secrets:
                try:
                    event = verify_webhook(body, headers, secret)
                    break
                except WebhookVerificationError:
                    continue
            if event is None:
                self._answer(400)
                return
            fresh = apply_once(db_path, event)
            word = "applied" if fresh else "duplicate, ignored:"
            print(f"{word} {event['type']} {event['id']}", flush=True)
            self._answer(200)

        def do_GET(self) -> None:
            self._answer(200)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8200)
    parser.add_argument("--db", type=Path, default=Path("inbox.sqlite3"))
    parser.add_argument(
        "--secret", action="append", required=True, help="whsec_...; repeat during a rotation"
    )
    args = parser.parse_args()
    with sqlite3.connect(args.db) as conn:
        conn.executescript(SCHEMA)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args.db, args.secret))
    print(f"listening on http://{args.host}:{args.port}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
