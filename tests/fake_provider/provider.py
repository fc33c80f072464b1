"""Starting the fake provider as a real process, and the calls tests make to it."""

from __future__ import annotations

import ssl
import sys
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from threading import Barrier
from typing import Any, TypeVar

import httpx

from fake_provider.merchants import DEFAULT_KEYS
from tests.support.control.processes import Process, free_port, start_process
from tests.support.control.system import PROVIDER_AUTH

T = TypeVar("T")


@cache
def _tls_context() -> ssl.SSLContext:
    # The provider speaks plain HTTP, but every httpx client builds a TLS context anyway and
    # loading the CA bundle each time costs tens of milliseconds; build it once.
    return ssl.create_default_context()


@dataclass
class Provider:
    """A running fake provider process and where its ledger lives."""

    process: Process
    url: str
    db_path: Path

    def client(
        self, timeout: float = 10.0, *, headers: Mapping[str, str] = PROVIDER_AUTH
    ) -> httpx.Client:
        """A client for this provider, as merchant `dev` unless `headers` says otherwise;
        close it (use `with`)."""
        return httpx.Client(
            base_url=self.url, timeout=timeout, verify=_tls_context(), headers=dict(headers)
        )


def start_provider(
    db_path: Path, log_dir: Path, *, env: Mapping[str, str] | None = None
) -> Provider:
    """Start `payments fake-provider` on a free port with its ledger at `db_path`; `env`
    adds settings (`PAYMENTS_FAKE_PROVIDER_SETTLEMENT_LAG_DAYS`, `PAYMENTS_FAKE_PROVIDER_KEYS`)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_process(
        "fake-provider",
        [sys.executable, "-m", "app.cli", "fake-provider", "--port", str(port)],
        env={
            "PAYMENTS_FAKE_PROVIDER_DB": str(db_path),
            "PAYMENTS_FAKE_PROVIDER_ADMIN": "1",
            "PAYMENTS_FAKE_PROVIDER_KEYS": DEFAULT_KEYS,
            **(env or {}),
        },
        log_dir=log_dir,
        ready_url=f"{url}/healthz",
        url=url,
        fork=True,
    )
    return Provider(process=process, url=url, db_path=db_path)


def new_key() -> str:
    """An idempotency key no other test uses."""
    return f"test-{uuid.uuid4().hex}"


def new_account() -> str:
    """An ordinary (approved) account id no other test uses."""
    return f"acc_{uuid.uuid4().hex[:12]}"


def charge_body(
    *,
    account_id: str = "acc_ok",
    amount_minor: int = 1250,
    currency: str = "EUR",
    reference: str = "order-1",
) -> dict[str, Any]:
    """A valid `POST /charges` body."""
    return {
        "amount_minor": amount_minor,
        "currency": currency,
        "account_id": account_id,
        "reference": reference,
    }


def post_charge(client: httpx.Client, key: str, body: dict[str, Any]) -> httpx.Response:
    """`POST /charges` with `key` as the Idempotency-Key."""
    return client.post("/charges", json=body, headers={"Idempotency-Key": key})


def authorize(
    client: httpx.Client, *, account_id: str | None = None, amount_minor: int = 1000
) -> dict[str, Any]:
    """A new manual charge (`"capture": "manual"`), approved: the authorization's body."""
    body = {
        **charge_body(account_id=account_id or new_account(), amount_minor=amount_minor),
        "capture": "manual",
    }
    response = post_charge(client, new_key(), body)
    assert response.status_code == 201, response.text
    charge: dict[str, Any] = response.json()
    assert charge["status"] == "authorized", charge
    return charge


def post_capture(
    client: httpx.Client, key: str, charge_id: str, amount_minor: int
) -> httpx.Response:
    """`POST /charges/{charge_id}/captures` of `amount_minor`, with `key` as the Idempotency-Key."""
    return client.post(
        f"/charges/{charge_id}/captures",
        json={"amount_minor": amount_minor},
        headers={"Idempotency-Key": key},
    )


def post_void(client: httpx.Client, key: str, charge_id: str) -> httpx.Response:
    """`POST /charges/{charge_id}/voids` with `key` as the Idempotency-Key."""
    return client.post(f"/charges/{charge_id}/voids", json={}, headers={"Idempotency-Key": key})


def charge_by_key(client: httpx.Client, key: str) -> dict[str, Any]:
    """The charge under `key`, as its lookup answers it."""
    response = client.get("/charges", params={"idempotency_key": key})
    assert response.status_code == 200, response.text
    charge: dict[str, Any] = response.json()
    return charge


def add_fault(client: httpx.Client, **rule: Any) -> dict[str, Any]:
    """Arm a fault rule; return it as the provider echoes it."""
    response = client.post("/_faults", json=rule)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def fault_rules(client: httpx.Client) -> list[dict[str, Any]]:
    """The rules the provider still holds."""
    response = client.get("/_faults")
    assert response.status_code == 200, response.text
    rules: list[dict[str, Any]] = response.json()["faults"]
    return rules


def ledger(client: httpx.Client) -> list[dict[str, Any]]:
    """Every charge in the provider's ledger."""
    response = client.get("/charges")
    assert response.status_code == 200, response.text
    charges: list[dict[str, Any]] = response.json()["charges"]
    return charges


def ledger_for(client: httpx.Client, key: str) -> list[dict[str, Any]]:
    """The ledger entries under `key` (a correct provider has at most one)."""
    return [charge for charge in ledger(client) if charge["idempotency_key"] == key]


def all_at_once(count: int, call: Callable[[int], T]) -> list[T]:
    """Run `call(i)` for i in range(count) on `count` threads released together."""
    barrier = Barrier(count)

    def run(index: int) -> T:
        barrier.wait(timeout=30)
        return call(index)

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


# The id a listing's `starting_after` takes, by the listing's path.
LISTED_IDS = {
    "/charges": "charge_id",
    "/refunds": "refund_id",
    "/captures": "capture_id",
    "/voids": "void_id",
}


def listed(client: httpx.Client, path: str, **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of the listing at `path` (`/charges`, `/refunds`, `/captures`, `/voids`)
    with `params`, following
    `starting_after` until `has_more` is false (`limit` 100 unless given: a query with no
    parameter at all would read the whole ledger instead)."""
    pages: list[list[dict[str, Any]]] = []
    query = {"limit": 100, **params}
    while True:
        response = client.get(path, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(body["data"])
        if not body["has_more"]:
            return pages
        assert body["data"], "has_more with an empty page"
        query["starting_after"] = body["data"][-1][LISTED_IDS[path]]


def settlement(client: httpx.Client, day: str) -> dict[str, Any]:
    """The settlement report of `day` (`2025-01-31`) as JSON."""
    response = client.get(f"/settlements/{day}")
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def edit_charge(client: httpx.Client, charge_id: str, **change: Any) -> dict[str, Any]:
    """`PATCH /_ledger/charges/{charge_id}`: overwrite the given members."""
    response = client.patch(f"/_ledger/charges/{charge_id}", json=change)
    assert response.status_code == 200, response.text
    charge: dict[str, Any] = response.json()
    return charge


def add_ledger_charge(client: httpx.Client, **charge: Any) -> dict[str, Any]:
    """`POST /_ledger/charges`: a charge no request made."""
    response = client.post("/_ledger/charges", json=charge)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created
