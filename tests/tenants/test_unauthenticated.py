"""What a request without a valid API key costs a real API process, counted by PostgreSQL.

A token that cannot be a key is refused without a lookup; unknown keys from one client
address are limited (`429` with `Retry-After` once over, before any lookup); and unknown
keys are remembered apart from valid ones, so a flood of them never pushes a valid key out
of the cache. Each test counts what the API did in the database (`pg_stat_database` and
`pg_stat_user_tables`, read once the API has stopped: tests/support/control/statistics.py).
"""

from __future__ import annotations

import secrets
import string

import httpx
import psycopg
from psycopg.rows import DictRow

from app.tenants.keys import KEY_LENGTH, KEY_PREFIX, generate_api_key
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.control.statistics import read_counts, stop_and_wait_for_counts
from tests.support.factories.tenants import TenantHandle

LIMITED = {"PAYMENTS_UNAUTHENTICATED_RATE_LIMIT_PER_S": "0.1"}


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _not_keys(count: int) -> list[str]:
    """Tokens of visible ASCII that no `generate_api_key` could have made, many of them
    close to a key: one character short or long, another prefix, a character outside the
    alphabet, a last character a 32-byte key cannot end with."""
    alphabet = string.ascii_letters + string.digits + "-_"
    made: list[str] = []
    while len(made) < count:
        key = generate_api_key()
        body = "".join(secrets.choice(alphabet) for _ in range(KEY_LENGTH - len(KEY_PREFIX)))
        made += [
            key[:-1],
            key + "A",
            "pk_" + key[3:],
            key[:10] + "." + key[11:],
            key[:-1] + "B",
            KEY_PREFIX + body[:-1] + "Z",
            secrets.token_hex(16),
        ]
    return made[:count]


def _assert_limited(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "RATE_LIMITED"
    assert answer.headers["retry-after"].isdigit()
    assert 1 <= int(answer.headers["retry-after"]) <= 10


def _url(api: Process) -> str:
    assert api.url is not None
    return api.url


def test_tokens_that_cannot_be_keys_are_refused_without_a_lookup(
    spawn: Spawner, db: psycopg.Connection[DictRow]
) -> None:
    before = read_counts(db, "api_keys")
    api = spawn.api()
    tokens = _not_keys(350)
    with httpx.Client(base_url=_url(api)) as client:
        for token in tokens:
            # Routed and fast routes alike.
            refused = client.get("/events", headers=_bearer(token))
            assert refused.status_code == 401, (token, refused.text)
            assert refused.json()["code"] == "UNAUTHENTICATED"
        paid = client.post("/payments", json={}, headers=_bearer(tokens[0]))
        assert paid.status_code == 401
    stop_and_wait_for_counts(db, api)
    spent = read_counts(db, "api_keys").since(before)

    assert spent.scans["api_keys"] == 0
    # The API's start and stop take about 60 (its pool's connections); a lookup per token
    # would be 350 more.
    assert spent.transactions < 150, spent


def test_unknown_keys_from_one_address_are_limited_before_any_lookup(
    spawn: Spawner, db: psycopg.Connection[DictRow], tenant: TenantHandle
) -> None:
    before = read_counts(db, "api_keys")
    api = spawn.api(**LIMITED, PAYMENTS_UNAUTHENTICATED_RATE_LIMIT_BURST="20")
    with httpx.Client(base_url=_url(api)) as client:
        # The tenant's key, used once from this address: remembered from now on.
        assert client.get("/events", headers=_bearer(tenant.api_key)).status_code == 200
        answers = [client.get("/events", headers=_bearer(generate_api_key())) for _ in range(200)]
        assert [a.status_code for a in answers[:20]] == [401] * 20
        for answer in answers[20:]:
            _assert_limited(answer)
        # Over the limit, a malformed token or none at all is refused the same way.
        _assert_limited(client.get("/events", headers=_bearer("sk_nope")))
        _assert_limited(client.get("/events"))
        _assert_limited(client.post("/payments", json={}, headers=_bearer(generate_api_key())))
        # A key this process remembers is not the address's to refuse.
        assert client.get("/events", headers=_bearer(tenant.api_key)).status_code == 200
    # Another address has a bucket of its own.
    other = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=_url(api), transport=other) as elsewhere:
        assert elsewhere.get("/events", headers=_bearer(generate_api_key())).status_code == 401
    stop_and_wait_for_counts(db, api)
    spent = read_counts(db, "api_keys").since(before)

    # The tenant's key once, the first 20 unknown keys, the other address's: no more.
    assert spent.scans["api_keys"] <= 1 + 1 + 20 + 1, spent
    # About 60 for the API's start and stop; a lookup per unknown key would be 200 more.
    assert spent.transactions < 150, spent


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_limit(
    spawn: Spawner, db: psycopg.Connection[DictRow]
) -> None:
    api = spawn.api(
        **LIMITED,
        PAYMENTS_UNAUTHENTICATED_RATE_LIMIT_BURST="3",
        PAYMENTS_FORWARDED_ALLOW_IPS="127.0.0.1",
    )
    with httpx.Client(base_url=_url(api)) as proxy:

        def from_client(address: str) -> httpx.Response:
            return proxy.get("/events", headers={"x-forwarded-for": address})

        assert [from_client("203.0.113.7").status_code for _ in range(3)] == [401] * 3
        _assert_limited(from_client("203.0.113.7"))
        assert from_client("203.0.113.8").status_code == 401


def test_unknown_keys_do_not_push_a_valid_key_out_of_the_cache(
    spawn: Spawner, db: psycopg.Connection[DictRow], tenant: TenantHandle
) -> None:
    # Used just now: its first lookup does not write its last use, so every scan of
    # api_keys below is a lookup.
    db.execute("UPDATE api_keys SET last_used_at = now() WHERE tenant_id = %s", (tenant.id,))
    before = read_counts(db, "api_keys")
    # Ten valid keys remembered, one unknown one (the limit on unknown keys is off).
    api = spawn.api(PAYMENTS_API_KEY_CACHE_SIZE="10")
    unknown = 40
    with httpx.Client(base_url=_url(api)) as client:
        assert client.get("/events", headers=_bearer(tenant.api_key)).status_code == 200
        for _ in range(unknown):
            refused = client.get("/events", headers=_bearer(generate_api_key()))
            assert refused.status_code == 401
        # Within the 4 s a valid key is remembered: no lookup for it.
        assert client.get("/events", headers=_bearer(tenant.api_key)).status_code == 200
    stop_and_wait_for_counts(db, api)
    spent = read_counts(db, "api_keys").since(before)

    assert spent.scans["api_keys"] == 1 + unknown, spent
