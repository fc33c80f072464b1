"""Admin tokens expire: `--ttl` days (`PAYMENTS_ADMIN_TOKEN_TTL_DAYS`, 30, by default); an
expired token is refused by the admin API and the console login, and ends its sessions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta

import httpx
import psycopg
from psycopg.rows import DictRow

from app.clock import utcnow
from tests.support.control.processes import REPO_ROOT, Process
from tests.support.factories.operators import make_admin

Db = psycopg.Connection[DictRow]


def _create(database_url: str, *args: str, **env: str) -> tuple[str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "admin", "token", "create", *args],
        env={**os.environ, "DATABASE_URL": database_url, **env},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1], result.stderr


def _expires(db: Db, token_prefix: str) -> timedelta:
    row = db.execute(
        "SELECT expires_at - now() AS left FROM admin_tokens WHERE prefix = %s",
        (token_prefix[:12],),
    ).fetchone()
    assert row is not None
    left: timedelta = row["left"]
    return left


def test_a_new_token_expires_after_its_ttl(database_url: str, db: Db) -> None:
    default, said = _create(database_url, "ttl-default")
    assert "expires" in said
    assert timedelta(days=29, hours=23) < _expires(db, default) <= timedelta(days=30)

    short, _ = _create(database_url, "ttl-short", "--ttl", "2")
    assert timedelta(days=1, hours=23) < _expires(db, short) <= timedelta(days=2)

    configured, _ = _create(database_url, "ttl-env", PAYMENTS_ADMIN_TOKEN_TTL_DAYS="7")
    assert timedelta(days=6, hours=23) < _expires(db, configured) <= timedelta(days=7)


def test_a_ttl_out_of_range_is_refused(database_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "admin", "token", "create", "x", "--ttl", "0"],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 1
    assert "--ttl" in result.stderr


def test_an_expired_token_is_refused_by_the_admin_api(api: Process, db: Db) -> None:
    expired = make_admin(db, "expired-api", ttl_s=-1)
    live = make_admin(db, "live-api", ttl_s=60)
    url = f"{api.admin_url}/admin/operations"

    refused = httpx.get(url, headers={"Authorization": f"Bearer {expired.token}"})
    assert refused.status_code == 401
    assert refused.json()["code"] == "UNAUTHENTICATED"
    assert httpx.get(url, headers={"Authorization": f"Bearer {live.token}"}).status_code == 200


def test_an_expired_token_cannot_log_in_and_its_sessions_end(api: Process, db: Db) -> None:
    expired = make_admin(db, "expired-console", ttl_s=-1)
    live = make_admin(db, "expiring-console", ttl_s=3600)
    assert api.admin_url is not None

    def login(http: httpx.Client, token: str) -> httpx.Response:
        form = http.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        return http.post("/console/login", data={"token": token, "csrf": csrf.group(1)})

    with httpx.Client(base_url=api.admin_url) as http:
        assert login(http, expired.token).headers["location"] == "/console/login?error=1"
    with httpx.Client(base_url=api.admin_url) as http:
        assert login(http, live.token).headers["location"] == "/console"
        assert http.get("/console").status_code == 200
        db.execute(
            "UPDATE admin_tokens SET expires_at = %s WHERE name = %s",
            (utcnow() - timedelta(seconds=1), live.name),
        )
        assert http.get("/console").headers["location"] == "/console/login"


def test_token_list_shows_the_expiry(database_url: str) -> None:
    _create(database_url, "listed")
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "admin", "token", "list"],
        env={**os.environ, "DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "expires" in result.stdout.splitlines()[0]
