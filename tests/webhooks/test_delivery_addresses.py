"""The address check at delivery, on a name the worker resolves then: a name that now
resolves to a non-public address is refused, and the worker connects to the address it
vetted, never to the name again (DNS rebinding).

The endpoint's URL names `hooks-<random>.rebind.test`, a name that cannot be refused by its
spelling (it is not `localhost`, nor an address): only what it resolves to at delivery
decides. A real worker asks a name server of the test's own (tests/webhooks/names.py: the
worker's /etc/resolv.conf, in a mount namespace of its own, names it) through glibc's
getaddrinfo as in production. The receiver is a real https process serving a certificate
for that name from a test CA the worker trusts, so a connection to it succeeds whenever
the worker makes one.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.receivers import Receiver, make_certificates
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.factories.tenants import TenantHandle
from tests.support.factories.webhooks import backlog, create_endpoint, endpoint_uuid
from tests.support.readers.webhooks import delivery_rows
from tests.webhooks.names import name_server, spawn_worker_asking

Db = psycopg.Connection[DictRow]

# A name of each test's own (another test's delivery left pending must not take the lookup
# a test's script meant for its own).
NAME = "hooks-{}.rebind.test"
# Where the name points once rebound: another loopback address, where the test listens.
REBOUND = "127.0.0.2"


@pytest.fixture
def receiver(spawn: Spawner, tmp_path: Path) -> Receiver:
    """An https receiver on 127.0.0.1 with a certificate for a name of this test's own
    (`receiver.host`)."""
    name = NAME.format(uuid.uuid4().hex[:12])
    return spawn.tls_receiver(tmp_path / "received.jsonl", make_certificates(tmp_path, name))


@pytest.fixture
def endpoint(
    client: httpx.Client, db: Db, tenant: TenantHandle, receiver: Receiver
) -> Iterator[dict[str, Any]]:
    """An endpoint whose stored URL names the receiver's name (as if it resolved to a public
    address when it was created), with one delivery due; deleted afterwards (what is still
    pending is cancelled)."""
    endpoint = create_endpoint(client, f"https://127.0.0.1:{receiver.port}/hook")
    db.execute(
        "UPDATE webhook_endpoints SET url = %s WHERE id = %s",
        (f"https://{receiver.host}:{receiver.port}/hook", endpoint_uuid(endpoint)),
    )
    backlog(db, tenant.id, endpoint, 1, "payment.succeeded")
    yield endpoint
    assert client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 204


@contextmanager
def _listening(address: str, port: int) -> Iterator[socket.socket]:
    """A TCP listener on `address`:`port` that accepts nothing: connections wait in its
    queue, to be counted (`_connections`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, port))
        sock.listen(16)
        sock.setblocking(False)
        yield sock


def _connections(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def test_a_name_that_resolves_to_a_non_public_address_at_delivery_is_refused(
    spawn: Spawner, db: Db, receiver: Receiver, endpoint: dict[str, Any]
) -> None:
    with name_server({receiver.host: ["127.0.0.1"]}) as names:
        worker = spawn_worker_asking(
            spawn,
            names,
            once=True,
            **FAST_WEBHOOKS,
            PAYMENTS_WEBHOOK_CA_FILE=str(receiver.ca_file),
            PAYMENTS_WEBHOOKS_ALLOW_LOCAL="0",
        )
        assert worker.wait_exit(timeout=60) == 0, worker.log()[-3000:]

    [delivery] = delivery_rows(db, endpoint)
    assert delivery["status"] == "pending", delivery
    assert delivery["attempts"], delivery
    for attempt in delivery["attempts"]:
        assert attempt["status_code"] is None
        assert attempt["error"] == "refused: resolves to a non-public address", attempt
    # Refused on what the name resolved to: asked, and nothing sent.
    assert names.lookups(receiver.host) >= 1
    assert receiver.records() == []


def test_the_worker_connects_to_the_address_it_vetted_not_to_the_name_again(
    spawn: Spawner, db: Db, receiver: Receiver, endpoint: dict[str, Any]
) -> None:
    """The name answers the receiver's address once, then REBOUND: a worker that looked the
    name up again to connect would reach the listener there, not the receiver."""
    with (
        _listening(REBOUND, receiver.port) as rebound,
        name_server({receiver.host: ["127.0.0.1", REBOUND]}) as names,
    ):
        worker = spawn_worker_asking(
            spawn,
            names,
            once=True,
            **FAST_WEBHOOKS,
            PAYMENTS_WEBHOOK_CA_FILE=str(receiver.ca_file),
            PAYMENTS_WEBHOOKS_ALLOW_LOCAL="1",
        )
        assert worker.wait_exit(timeout=60) == 0, worker.log()[-3000:]
        connections = _connections(rebound)

    [delivery] = delivery_rows(db, endpoint)
    assert delivery["status"] == "succeeded", delivery
    assert names.lookups(receiver.host) == 1
    assert connections == 0
    [record] = receiver.answered()
    # Sent to the vetted address with the name as the TLS server name and in Host.
    assert record["sni"] == receiver.host
    assert record["headers"]["host"] == f"{receiver.host}:{receiver.port}"
