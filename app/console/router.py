"""The web console at `/console`: server-rendered pages over the operators' desk.

Login exchanges an admin token for a session (a random id in an `HttpOnly`,
`SameSite=Strict` cookie, `Secure` over https; the database keeps its hash, so any API
process serves it and logout or revoking the token ends it everywhere). Every form carries
the session's CSRF token (the login form a double-submit one). Recheck and resolve show a
confirmation page first; both call the same `OperatorDesk` as the admin API.
"""

from __future__ import annotations

import hmac
import secrets
import uuid
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from app.admin import repository as admin_auth
from app.admin.desk import Resolution
from app.admin.models import ConsoleLogin
from app.admin.queries import OperationFilter
from app.admin.views import admin_operation_json, detail_json
from app.console.pages import render
from app.dependencies import Services, ServicesDep
from app.errors import NotFound, ProblemError
from app.http.auth import MAX_API_KEY_LENGTH

router = APIRouter(prefix="/console", include_in_schema=False)

SESSION_COOKIE = "payments_console"
LOGIN_CSRF_COOKIE = "payments_console_login"
SESSION_TTL_S = 8 * 3600
QUEUE_LIMIT = 100
_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}
_DONE = {"rechecked": "Rechecked.", "resolved": "Resolved."}


class _LoginRequired(Exception):
    pass


def _page(html: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=_HEADERS)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


async def _login(request: Request, services: Services) -> ConsoleLogin | None:
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id or len(session_id) > MAX_API_KEY_LENGTH:
        return None
    async with services.db.connection() as conn:
        return await admin_auth.find_session(conn, session_id)


def _csrf_ok(login: ConsoleLogin, sent: str) -> bool:
    return hmac.compare_digest(login.csrf_token.encode(), sent.encode())


@router.get("/login")
async def login_form(request: Request, error: str | None = None) -> Response:
    csrf = secrets.token_urlsafe(24)
    html = render("login.html", csrf=csrf, error=error == "1")
    response = _page(html, 401 if error else 200)
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        csrf,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        path="/console",
    )
    return response


@router.post("/login")
async def login(
    request: Request,
    services: ServicesDep,
    token: Annotated[str, Form(max_length=MAX_API_KEY_LENGTH)],
    csrf: Annotated[str, Form(max_length=100)],
) -> Response:
    expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if not expected or not hmac.compare_digest(expected.encode(), csrf.encode()):
        return _redirect("/console/login?error=1")
    async with services.db.transaction() as conn:
        operator = await admin_auth.authenticate(conn, token.strip())
        if operator is None:
            return _redirect("/console/login?error=1")
        session_id, _ = await admin_auth.open_session(conn, operator, ttl_s=SESSION_TTL_S)
    response = _redirect("/console")
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=SESSION_TTL_S,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        path="/console",
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/console")
    return response


@router.post("/logout")
async def logout(
    request: Request, services: ServicesDep, csrf: Annotated[str, Form(max_length=100)]
) -> Response:
    login = await _login(request, services)
    if login is not None and _csrf_ok(login, csrf):
        async with services.db.connection() as conn:
            await admin_auth.close_session(conn, request.cookies[SESSION_COOKIE])
    response = _redirect("/console/login")
    response.delete_cookie(SESSION_COOKIE, path="/console")
    return response


@router.get("")
async def dashboard(request: Request, services: ServicesDep) -> Response:
    login = await _login(request, services)
    if login is None:
        return _redirect("/console/login")
    overview = await services.operators.overview()
    queue = await services.operators.list(OperationFilter(needs_attention=True), limit=QUEUE_LIMIT)
    items = [admin_operation_json(s, with_history=False) for s in queue.items]
    return _page(
        render("dashboard.html", login=login, overview=overview, queue=items, more=queue.has_more)
    )


@router.get("/operations/{operation_id}")
async def operation_page(
    operation_id: str, request: Request, services: ServicesDep, done: str | None = None
) -> Response:
    login = await _login(request, services)
    if login is None:
        return _redirect("/console/login")
    return await _detail_page(services, login, operation_id, notice=_DONE.get(done or ""))


@router.post("/operations/{operation_id}/recheck")
async def recheck(
    operation_id: str,
    request: Request,
    services: ServicesDep,
    csrf: Annotated[str, Form(max_length=100)],
    confirmed: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    login = await _login(request, services)
    if login is None or not _csrf_ok(login, csrf):
        return _redirect("/console/login")
    parsed = _parse(operation_id)
    if confirmed != "yes":
        detail = detail_json(await services.operators.detail(parsed))
        return _page(render("confirm.html", login=login, op=detail, action="recheck"))
    try:
        await services.operators.recheck(parsed, login.operator)
    except ProblemError as exc:
        return await _detail_page(services, login, operation_id, error=exc)
    return _redirect(f"/console/operations/{parsed}?done=rechecked")


@router.post("/operations/{operation_id}/resolve")
async def resolve(
    operation_id: str,
    request: Request,
    services: ServicesDep,
    csrf: Annotated[str, Form(max_length=100)],
    outcome: Annotated[str, Form(max_length=20)] = "",
    reason: Annotated[str, Form(max_length=500)] = "",
    confirmed: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    login = await _login(request, services)
    if login is None or not _csrf_ok(login, csrf):
        return _redirect("/console/login")
    parsed = _parse(operation_id)
    values = {r.value for r in Resolution}
    if outcome not in values or not reason.strip():
        problem = _FormError("choose charged or not charged, and give a reason")
        return await _detail_page(services, login, operation_id, error=problem)
    if confirmed != "yes":
        detail = detail_json(await services.operators.detail(parsed))
        page = render(
            "confirm.html",
            login=login,
            op=detail,
            action="resolve",
            outcome=outcome,
            reason=reason.strip(),
        )
        return _page(page)
    try:
        await services.operators.resolve(
            parsed, Resolution(outcome), reason.strip(), login.operator
        )
    except ProblemError as exc:
        return await _detail_page(services, login, operation_id, error=exc)
    return _redirect(f"/console/operations/{parsed}?done=resolved")


class _FormError(ProblemError):
    status, code, title = 422, "VALIDATION_ERROR", "Form incomplete"


async def _detail_page(
    services: Services,
    login: ConsoleLogin,
    operation_id: str,
    *,
    notice: str | None = None,
    error: ProblemError | None = None,
) -> Response:
    try:
        detail = detail_json(await services.operators.detail(_parse(operation_id)))
    except NotFound:
        return _page(render("missing.html", login=login), 404)
    html = render(
        "operation.html", login=login, op=detail, notice=notice, error=error, deliveries=None
    )
    return _page(html, error.status if error is not None else 200)


def _parse(operation_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(operation_id)
    except ValueError:
        raise NotFound("no such operation") from None
