"""The webhook endpoints API: create (secret once), list, read, delete, rotate."""

from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant

Db = psycopg.Connection[DictRow]
HOOK = "http://127.0.0.1:9/hook"


def test_create_shows_the_secret_once(client: httpx.Client) -> None:
    created = client.post("/webhook-endpoints", json={"url": HOOK})
    assert created.status_code == 201, created.text
    body = created.json()
    assert set(body) == {"id", "url", "event_types", "secret", "created_at"}
    assert body["id"].startswith("we_")
    assert body["url"] == HOOK
    assert body["event_types"] is None
    assert body["secret"].startswith("whsec_")
    assert len(base64.b64decode(body["secret"].removeprefix("whsec_"))) == 32
    read = client.get(f"/webhook-endpoints/{body['id']}").json()
    assert "secret" not in read
    assert read == {k: v for k, v in body.items() if k != "secret"}
    listed = client.get("/webhook-endpoints").json()
    assert listed == {"data": [read], "has_more": False}


def test_event_types_are_checked_and_kept(client: httpx.Client) -> None:
    types = ["payment.declined", "payment.succeeded", "payment.declined"]
    created = client.post("/webhook-endpoints", json={"url": HOOK, "event_types": types})
    assert created.json()["event_types"] == ["payment.declined", "payment.succeeded"]
    for bad in (["payment.exploded"], [], "payment.succeeded", [1]):
        refused = client.post("/webhook-endpoints", json={"url": HOOK, "event_types": bad})
        assert refused.status_code == 422
        assert refused.json()["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    "url",
    [
        "https://10.0.0.1/hook",
        "https://169.254.169.254/latest",
        "http://example.com/hook",
        "ftp://127.0.0.1/hook",
        "not a url",
        "https://" + "a" * 2100 + ".com/",
    ],
)
def test_refused_urls_store_nothing(client: httpx.Client, url: str) -> None:
    refused = client.post("/webhook-endpoints", json={"url": url})
    assert refused.status_code == 422
    assert refused.json()["code"] == "VALIDATION_ERROR"
    assert refused.json()["errors"][0]["field"] == "url"
    assert client.get("/webhook-endpoints").json()["data"] == []


@pytest.mark.parametrize(
    "url",
    [
        "https://a..b/hook",
        "https://" + "x" * 64 + ".example.com/hook",
        "https://xn--zz.example.com/hook",
        "https://\u2764\ufe0f.example.com/hook",
        "https://example.com/\ud800",
        "https://exa\udfffmple.com/hook",
    ],
)
def test_invalid_hosts_and_text_are_refused_not_an_error(client: httpx.Client, url: str) -> None:
    # ASCII JSON: a lone surrogate goes as its `\\u` escape, as a client may send it.
    body = json.dumps({"url": url}).encode()
    refused = client.post(
        "/webhook-endpoints", content=body, headers={"content-type": "application/json"}
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "url"


def test_a_non_public_address_is_refused_without_naming_it(client: httpx.Client) -> None:
    refused = client.post("/webhook-endpoints", json={"url": "https://[64:ff9b::a00:7]/hook"})
    assert refused.status_code == 422
    body = refused.json()
    assert body["errors"] == [{"field": "url", "message": "resolves to a non-public address"}]
    assert "10.0.0.7" not in refused.text
    assert "a00:7" not in refused.text


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        # Fullwidth letters and digits, as UTS 46 maps them.
        (
            "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:9/hook",
            "http://localhost:9/hook",
        ),
        ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:9/hook", "http://127.0.0.1:9/hook"),
        ("http://LOCALHOST.:9/hook", "http://localhost:9/hook"),
    ],
)
def test_the_url_is_stored_and_shown_with_its_host_normalised(
    client: httpx.Client, url: str, stored: str
) -> None:
    created = client.post("/webhook-endpoints", json={"url": url})
    assert created.status_code == 201, created.text
    assert created.json()["url"] == stored
    assert client.get(f"/webhook-endpoints/{created.json()['id']}").json()["url"] == stored


@pytest.mark.parametrize(
    "body", [{}, {"url": 5}, {"url": HOOK, "extra": 1}, {"url": HOOK, "event_types": None, "x": 1}]
)
def test_bad_bodies(client: httpx.Client, body: dict[str, object]) -> None:
    assert client.post("/webhook-endpoints", json=body).status_code == 422
    assert client.post(
        "/webhook-endpoints", content=b"[", headers={"content-type": "application/json"}
    ).status_code in (400, 422)


def test_delete_and_rotate(client: httpx.Client) -> None:
    endpoint = client.post("/webhook-endpoints", json={"url": HOOK}).json()
    rotated = client.post(f"/webhook-endpoints/{endpoint['id']}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.json()["secret"] != endpoint["secret"]
    assert client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 204
    assert client.get(f"/webhook-endpoints/{endpoint['id']}").status_code == 404
    assert client.delete(f"/webhook-endpoints/{endpoint['id']}").status_code == 404
    assert client.post(f"/webhook-endpoints/{endpoint['id']}/rotate-secret").status_code == 404
    assert client.get("/webhook-endpoints").json()["data"] == []


def test_pages(client: httpx.Client) -> None:
    made = [client.post("/webhook-endpoints", json={"url": HOOK}).json()["id"] for _ in range(3)]
    first = client.get("/webhook-endpoints", params={"limit": 2}).json()
    assert first["has_more"] is True
    rest = client.get(
        "/webhook-endpoints", params={"limit": 2, "after": first["data"][-1]["id"]}
    ).json()
    assert [e["id"] for e in first["data"] + rest["data"]] == made
    assert rest["has_more"] is False


def test_another_tenants_endpoint_is_not_found(api: Process, client: httpx.Client, db: Db) -> None:
    endpoint = client.post("/webhook-endpoints", json={"url": HOOK}).json()["id"]
    with api_client(api, make_tenant(db, "other")) as other:
        for method, path in (
            ("GET", f"/webhook-endpoints/{endpoint}"),
            ("DELETE", f"/webhook-endpoints/{endpoint}"),
            ("POST", f"/webhook-endpoints/{endpoint}/rotate-secret"),
            ("GET", f"/webhook-endpoints/{endpoint}/deliveries"),
        ):
            assert other.request(method, path).status_code == 404
    assert client.get(f"/webhook-endpoints/{endpoint}").status_code == 200
    for bad in ("we_x", "nope", "we_" + "0" * 32):
        assert client.get(f"/webhook-endpoints/{bad}").status_code == 404


def test_a_tenant_has_at_most_16_endpoints(client: httpx.Client) -> None:
    made = [client.post("/webhook-endpoints", json={"url": HOOK}) for _ in range(16)]
    assert [r.status_code for r in made] == [201] * 16
    refused = client.post("/webhook-endpoints", json={"url": HOOK})
    assert refused.status_code == 409
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "WEBHOOK_ENDPOINT_LIMIT_REACHED"
    assert refused.json()["limit"] == 16
    assert len(client.get("/webhook-endpoints").json()["data"]) == 16
    # A deleted endpoint does not count.
    assert client.delete(f"/webhook-endpoints/{made[0].json()['id']}").status_code == 204
    assert client.post("/webhook-endpoints", json={"url": HOOK}).status_code == 201


def test_concurrent_creates_never_pass_the_limit(
    spawn: Spawner, tenant: TenantHandle, db: Db
) -> None:
    # Each create waits 0.3 s between its count and its insert: without the tenant's lock
    # every one of them would count fewer than 3 and insert.
    api = spawn.api(
        PAYMENTS_WEBHOOK_MAX_ENDPOINTS="3", PAYMENTS_FAILPOINTS="webhook_endpoint_insert=0.3"
    )
    with api_client(api, tenant) as http, ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(
            pool.map(lambda _: http.post("/webhook-endpoints", json={"url": HOOK}), range(10))
        )
    codes = sorted((a.status_code, a.json().get("code", "")) for a in answers)
    assert codes == [(201, "")] * 3 + [(409, "WEBHOOK_ENDPOINT_LIMIT_REACHED")] * 7
    row = db.execute(
        "SELECT count(*) AS n FROM webhook_endpoints WHERE tenant_id = %s", (tenant.id,)
    ).fetchone()
    assert row == {"n": 3}
