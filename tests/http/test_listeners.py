"""The operators' listener: the admin API, the console and `/metrics` on a port of their
own, never on the tenants' port; `Strict-Transport-Security` and `Secure` cookies there
outside development; `X-Forwarded-*` believed only from configured proxies."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import pytest

from app.server import proxy_options
from app.settings import Settings
from tests.support.control.processes import REPO_ROOT, Process, free_port
from tests.support.control.spawner import Spawner
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import new_key, payment_body, post_payment

OPERATOR_PATHS = ["/admin/operations", "/admin/overview", "/console", "/console/login"]
OPERATOR_PATHS += ["/console/static/console.css", "/metrics", "//admin/operations"]


@pytest.mark.parametrize("path", OPERATOR_PATHS)
def test_the_tenants_port_knows_no_operator_path(
    api: Process, admin: AdminHandle, path: str
) -> None:
    headers = {"Authorization": f"Bearer {admin.token}"}
    answer = httpx.get(f"{api.url}{path}", headers=headers)

    assert answer.status_code == 404
    assert answer.json()["code"] == "NOT_FOUND"
    assert "payments_" not in answer.text


def test_the_tenants_port_refuses_operator_posts_unread(api: Process) -> None:
    login = httpx.post(f"{api.url}/console/login", data={"token": "adm_x", "csrf": "x"})
    resolve = httpx.post(f"{api.url}/admin/operations/x/resolve", json={})

    assert (login.status_code, resolve.status_code) == (404, 404)


def test_the_operators_port_serves_them_and_nothing_of_the_tenants(
    api: Process, admin_client: httpx.Client, client: httpx.Client
) -> None:
    assert api.admin_url is not None
    assert admin_client.get("/admin/overview").status_code == 200
    assert httpx.get(f"{api.admin_url}/console").headers["location"] == "/console/login"
    assert "payments_provider_breaker_state" in httpx.get(f"{api.admin_url}/metrics").text
    for where in (api.url, api.admin_url):
        assert httpx.get(f"{where}/healthz").json() == {"status": "ok"}

    tenant_key = {"Authorization": str(client.headers["authorization"])}
    with httpx.Client(base_url=api.admin_url, headers=tenant_key) as on_admin_port:
        assert post_payment(on_admin_port, payment_body(), key=new_key()).status_code == 404
        assert on_admin_port.get("/events").status_code == 404
        assert on_admin_port.get("/openapi.json").status_code == 404
    # ... while the tenants' port still takes payments, on its fast path.
    assert post_payment(client, payment_body(), key=new_key()).status_code == 201


def test_outside_development_the_console_cookie_is_secure_and_hsts_is_sent(
    spawn: Spawner, admin: AdminHandle
) -> None:
    api = spawn.api(PAYMENTS_DEVELOPMENT="0")
    assert api.admin_url is not None
    with httpx.Client(base_url=api.admin_url) as http:
        form = http.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        assert "Secure" in form.headers["set-cookie"]
        answer = http.post(
            "/console/login",
            data={"token": admin.token, "csrf": csrf.group(1)},
            # Over plain http the client keeps a Secure cookie to itself: sent by hand.
            headers={"cookie": f"payments_console_login={csrf.group(1)}"},
        )
        assert answer.headers["location"] == "/console"
        session = answer.headers["set-cookie"]
        assert session.startswith("payments_console=")
        assert "Secure" in session
        assert "HttpOnly" in session
        for response in (form, answer, http.get("/metrics"), http.get("/admin/operations")):
            assert response.headers["strict-transport-security"].startswith("max-age=")
    assert "strict-transport-security" not in httpx.get(f"{api.url}/healthz").headers


def test_in_development_the_console_goes_without_hsts(api: Process) -> None:
    answer = httpx.get(f"{api.admin_url}/console/login")

    assert "strict-transport-security" not in answer.headers
    assert "Secure" not in answer.headers["set-cookie"]


def test_forwarded_headers_are_believed_from_no_one_by_default() -> None:
    assert proxy_options(Settings()) == {"proxy_headers": False, "forwarded_allow_ips": ""}
    configured = Settings(forwarded_allow_ips=" 10.0.0.5, 10.1.0.0/16 ")
    assert proxy_options(configured) == {
        "proxy_headers": True,
        "forwarded_allow_ips": "10.0.0.5,10.1.0.0/16",
    }


def test_a_forwarded_proto_from_an_untrusted_peer_changes_nothing(spawn: Spawner) -> None:
    # In development the cookie is Secure only over https: a client on 127.0.0.1 claiming
    # https would get it, were its X-Forwarded-Proto believed (uvicorn's own default).
    api = spawn.api(PAYMENTS_DEVELOPMENT="1")
    forged = httpx.get(f"{api.admin_url}/console/login", headers={"X-Forwarded-Proto": "https"})
    assert "Secure" not in forged.headers["set-cookie"]

    trusting = spawn.api(PAYMENTS_DEVELOPMENT="1", PAYMENTS_FORWARDED_ALLOW_IPS="127.0.0.1")
    proxied = httpx.get(
        f"{trusting.admin_url}/console/login", headers={"X-Forwarded-Proto": "https"}
    )
    assert "Secure" in proxied.headers["set-cookie"]


def test_the_api_refuses_one_port_for_both_listeners(spawn: Spawner) -> None:
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        env={**os.environ, **spawn.env(PAYMENTS_ADMIN_PORT=str(port))},
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode != 0
    assert "PAYMENTS_ADMIN_PORT" in result.stderr
