"""The console's session and form protections, over plain HTTP against the real API.

- login with an admin token only (a tenant's key is refused), cookie `HttpOnly`,
  `SameSite=Strict`, path `/console`; pages without a session redirect to the login;
- a form without the session's CSRF token changes nothing; nor does a login form without
  its double-submit token;
- logout ends the session everywhere (the database holds it), and so does revoking the
  token; the stylesheet is served as a static file.
"""

from __future__ import annotations

import re

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle, flag
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.operations import operation, transitions


def _login(http: httpx.Client, token: str) -> httpx.Response:
    form = http.get("/console/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    return http.post("/console/login", data={"token": token, "csrf": csrf.group(1)})


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def test_login_sets_a_strict_httponly_session_and_pages_need_it(
    api: Process, admin: AdminHandle, tenant: TenantHandle
) -> None:
    with httpx.Client(base_url=str(api.admin_url)) as http:
        assert http.get("/console").headers["location"] == "/console/login"
        refused = _login(http, tenant.api_key)
        assert refused.headers["location"] == "/console/login?error=1"
        assert "payments_console" not in http.cookies

        answer = _login(http, admin.token)
        assert (answer.status_code, answer.headers["location"]) == (303, "/console")
        cookie = next(
            c for c in answer.headers.get_list("set-cookie") if c.startswith("payments_console=")
        )
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert "Path=/console" in cookie
        dashboard = http.get("/console")
        assert dashboard.status_code == 200
        assert "Needs attention" in dashboard.text
        assert dashboard.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in dashboard.headers["content-security-policy"]
        css = http.get("/console/static/console.css")
        assert css.status_code == 200
        assert css.headers["content-type"].startswith("text/css")


def test_a_login_form_without_its_csrf_token_is_refused(api: Process, admin: AdminHandle) -> None:
    with httpx.Client(base_url=str(api.admin_url)) as http:
        forged = http.post("/console/login", data={"token": admin.token, "csrf": "guess"})
        assert forged.headers["location"] == "/console/login?error=1"
        assert "payments_console" not in http.cookies


def test_forms_without_the_sessions_csrf_token_change_nothing(
    api: Process,
    admin: AdminHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    audit = len(transitions(db, flagged.operation_id))
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        path = f"/console/operations/{flagged.operation_id}"
        page = http.get(path)
        assert page.status_code == 200
        assert "needs attention" in page.text
        form = {"outcome": "charged", "reason": "r", "confirmed": "yes", "csrf": "forged"}
        forged = http.post(f"{path}/resolve", data=form)
        assert forged.status_code == 303
        assert forged.headers["location"] == "/console/login"
        recheck = http.post(f"{path}/recheck", data={"csrf": "x", "confirmed": "yes"})
        assert recheck.headers["location"] == "/console/login"
        assert operation(db, flagged.operation_id)["state"] == "UNKNOWN_REQUIRES_RECOVERY"
        assert len(transitions(db, flagged.operation_id)) == audit

        # With the session's token, the first post only asks for confirmation.
        csrf = _csrf(page.text)
        confirm = http.post(f"{path}/resolve", data={**form, "csrf": csrf, "confirmed": ""})
        assert confirm.status_code == 200
        assert "Yes, resolve it" in confirm.text
        assert len(transitions(db, flagged.operation_id)) == audit
        done = http.post(f"{path}/resolve", data={**form, "csrf": csrf})
        assert done.headers["location"] == f"{path}?done=resolved"
        assert operation(db, flagged.operation_id)["state"] == "COMPLETED"


def test_logout_and_revocation_end_the_session(
    api: Process, admin: AdminHandle, db: psycopg.Connection[DictRow]
) -> None:
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        page = http.get("/console")
        assert page.status_code == 200
        out = http.post("/console/logout", data={"csrf": _csrf(page.text)})
        assert out.headers["location"] == "/console/login"
        assert http.get("/console").status_code == 303

    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        stolen = dict(http.cookies)
        assert http.get("/console").status_code == 200
        db.execute("UPDATE admin_tokens SET revoked_at = now() WHERE name = %s", (admin.name,))
    with httpx.Client(base_url=str(api.admin_url), cookies=stolen) as again:
        assert again.get("/console").status_code == 303


def test_recheck_from_the_console_asks_first_then_reconciles(
    api: Process,
    admin: AdminHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        path = f"/console/operations/{flagged.operation_id}"
        csrf = _csrf(http.get(path).text)
        confirm = http.post(f"{path}/recheck", data={"csrf": csrf})
        assert confirm.status_code == 200
        assert "Yes, recheck" in confirm.text
        assert operation(db, flagged.operation_id)["state"] == "UNKNOWN_REQUIRES_RECOVERY"
        done = http.post(f"{path}/recheck", data={"csrf": csrf, "confirmed": "yes"})
        assert done.headers["location"] == f"{path}?done=rechecked"
        page = http.get(done.headers["location"])
        assert "Rechecked." in page.text
        assert f"operator:{admin.name}" in page.text
        assert operation(db, flagged.operation_id)["state"] == "COMPLETED"
        final = http.post(f"{path}/recheck", data={"csrf": csrf, "confirmed": "yes"})
        assert final.status_code == 409
        assert "OPERATION_FINAL" in final.text
