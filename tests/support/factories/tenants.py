"""Tenants for tests: one with an API key, written to the tables as the CLI writes it,
and a client of the API that sends the key."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import httpx
import psycopg
from psycopg.rows import DictRow

from app.tenants.keys import display_prefix, generate_api_key, hash_api_key
from tests.support.control.processes import Process


@dataclass(frozen=True)
class TenantHandle:
    id: uuid.UUID
    api_key: str


def make_tenant(conn: psycopg.Connection[DictRow], name: str = "test tenant") -> TenantHandle:
    api_key = generate_api_key()
    tenant_id = uuid.uuid4()
    conn.execute("INSERT INTO tenants (id, name) VALUES (%s, %s)", (tenant_id, name))
    conn.execute(
        "INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES (%s, %s, %s, %s)",
        (uuid.uuid4(), tenant_id, hash_api_key(api_key), display_prefix(api_key)),
    )
    return TenantHandle(id=tenant_id, api_key=api_key)


def api_client(api: Process, tenant: TenantHandle) -> httpx.Client:
    assert api.url is not None
    return httpx.Client(
        base_url=api.url,
        headers={"Authorization": f"Bearer {tenant.api_key}"},
        timeout=30.0,
    )
