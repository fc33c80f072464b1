"""An API with a small per-tenant rate limit: 429 with Retry-After, other tenants unaffected.

The session's API runs with the limit off (tests/support/control/system.py); this one starts its
own with a burst of 3 and one request every 10 s, so the test never waits for a refill.
"""

from __future__ import annotations

import uuid

import httpx
import psycopg
from psycopg.rows import DictRow

from app.tenants.keys import display_prefix, generate_api_key, hash_api_key
from tests.support.control.spawner import Spawner
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant


def _assert_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "RATE_LIMITED"
    assert body["status"] == 429
    assert body["request_id"] == response.headers["x-request-id"]
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit(), retry_after
    assert 1 <= int(retry_after) <= 10, retry_after


def test_a_tenant_over_its_rate_is_refused_and_others_are_not(
    spawn: Spawner, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    api = spawn.api(PAYMENTS_TENANT_RATE_LIMIT_PER_S="0.1", PAYMENTS_TENANT_RATE_LIMIT_BURST="3")
    other = make_tenant(db, "another tenant")
    with api_client(api, tenant) as busy, api_client(api, other) as calm:
        # The burst: a payment (POST /payments, the fast path) and two routed reads.
        key, body = new_key(), payment_body()
        assert post_payment(busy, body, key=key).status_code == 201
        assert busy.get(f"/payments/{uuid.uuid4()}").status_code == 404
        assert busy.get("/operations", params={"idempotency_key": key}).status_code == 200

        # Over it, on the fast path and on the routed ones alike; nothing is done.
        _assert_limited(post_payment(busy, payment_body(), key=new_key()))
        _assert_limited(post_payment(busy, body, key=key))
        _assert_limited(busy.get(f"/payments/{uuid.uuid4()}"))
        _assert_limited(busy.get("/events"))

        # Another tenant has its own bucket.
        assert post_payment(calm, payment_body(), key=new_key()).status_code == 201
        assert calm.get("/events").status_code == 200

        # A bad key is still a 401, never counted against anyone.
        with httpx.Client(base_url=str(api.url)) as anonymous:
            unknown = anonymous.get("/events", headers={"authorization": "Bearer pk_nope"})
        assert unknown.status_code == 401
        # Health and metrics are not tenant routes.
        assert busy.get("/healthz").status_code == 200


def _second_key(db: psycopg.Connection[DictRow], tenant: TenantHandle) -> TenantHandle:
    """Another API key of `tenant`, written as `payments tenant key create` writes it."""
    api_key = generate_api_key()
    db.execute(
        "INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES (%s, %s, %s, %s)",
        (uuid.uuid4(), tenant.id, hash_api_key(api_key), display_prefix(api_key)),
    )
    return TenantHandle(id=tenant.id, api_key=api_key)


def test_a_tenants_keys_all_draw_on_the_tenants_one_bucket(
    spawn: Spawner, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    # Limited by key, each key would have a burst of its own and the second key's two
    # requests below would both pass.
    api = spawn.api(PAYMENTS_TENANT_RATE_LIMIT_PER_S="0.1", PAYMENTS_TENANT_RATE_LIMIT_BURST="3")
    other_key = _second_key(db, tenant)
    with api_client(api, tenant) as first, api_client(api, other_key) as second:
        assert first.get("/events").status_code == 200
        assert first.get("/events").status_code == 200
        assert second.get("/events").status_code == 200
        # The tenant's burst of 3 is spent, by both keys together.
        _assert_limited(second.get("/events"))
        _assert_limited(first.get("/events"))
        _assert_limited(post_payment(second, payment_body(), key=new_key()))


def test_every_tenant_route_documents_the_429() -> None:
    from app.main import create_app
    from app.settings import Settings

    document = create_app(Settings()).openapi()
    tenant_routes = [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if {"HTTPBearer": []} in operation.get("security", [])
    ]
    assert ("POST", "/payments") in {(m, p) for m, p, _ in tenant_routes}
    assert len(tenant_routes) > 10
    for method, path, operation in tenant_routes:
        responses = operation["responses"]
        assert "401" in responses, (method, path)
        assert "RATE_LIMITED" in responses.get("429", {}).get("description", ""), (method, path)
        assert "Retry-After" in responses["429"]["headers"], (method, path)
