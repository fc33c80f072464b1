"""The web console at `/console`: server-rendered pages over the operators' actions.

Login exchanges an admin token for a session (a random id in an `HttpOnly`,
`SameSite=Strict` cookie, always `Secure` but under `payments dev` over plain http; the
database keeps its hash, so any API process serves it and logout, revoking the token or its
expiry ends it everywhere). Every form carries
the session's CSRF token (the login form a double-submit one). Recheck and resolve show a
confirmation page first; both call the same `OperatorActions` as the admin API. The webhook
pages (failed deliveries, redelivery) are in `deliveries.py`, the discrepancy queue's in
`discrepancies.py`, the providers' notifications' in `provider_events.py`, what all share
in `web.py`.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from app.admin import repository as admin_auth
from app.admin.operators import Resolution
from app.admin.views import admin_operation_json, detail_json
from app.console import deliveries, discrepancies, lists, provider_events, search
from app.console.charts import dashboard_charts
from app.console.pages import render
from app.console.web import (
    SESSION_COOKIE,
    csrf_ok,
    current_login,
    detail_page,
    page,
    parse_operation_id,
    record_words,
    redirect,
)
from app.dependencies import Services, ServicesDep
from app.errors import ProblemError
from app.http.auth import MAX_API_KEY_LENGTH
from app.operations.operator_reads import OperationFilter
from app.provider_events.inbox import counts_by_state
from app.settlement.changes import check_reason

router = APIRouter(prefix="/console", include_in_schema=False)

LOGIN_CSRF_COOKIE = "payments_console_login"
SESSION_TTL_S = 8 * 3600
QUEUE_LIMIT = 100
_DONE = {"rechecked": "Rechecked.", "resolved": "Resolved.", "redelivered": "Redelivery queued."}


def _secure(request: Request, services: Services) -> bool:
    """The cookies' `Secure`: always, but for `payments dev` over plain http.

    Not from the request's scheme alone: behind a proxy that ends TLS the request arrives
    as http (unless the proxy is trusted with `X-Forwarded-Proto`), and the cookie would
    then travel without the flag.
    """
    return not services.settings.development or request.url.scheme == "https"


@router.get("/login")
async def login_form(request: Request, services: ServicesDep, error: str | None = None) -> Response:
    csrf = secrets.token_urlsafe(24)
    html = render("login.html", csrf=csrf, error=error == "1")
    response = page(html, 401 if error else 200)
    response.set_cookie(
        LOGIN_CSRF_COOKIE,
        csrf,
        httponly=True,
        samesite="strict",
        secure=_secure(request, services),
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
        return redirect("/console/login?error=1")
    async with services.db.transaction() as conn:
        operator = await admin_auth.authenticate(conn, token.strip())
        if operator is None:
            return redirect("/console/login?error=1")
        session_id, _ = await admin_auth.open_session(conn, operator, ttl_s=SESSION_TTL_S)
    response = redirect("/console")
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=SESSION_TTL_S,
        httponly=True,
        samesite="strict",
        secure=_secure(request, services),
        path="/console",
    )
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/console")
    return response


@router.post("/logout")
async def logout(
    request: Request, services: ServicesDep, csrf: Annotated[str, Form(max_length=100)]
) -> Response:
    login = await current_login(request, services)
    if login is not None and csrf_ok(login, csrf):
        async with services.db.connection() as conn:
            await admin_auth.close_session(conn, request.cookies[SESSION_COOKIE])
    response = redirect("/console/login")
    response.delete_cookie(SESSION_COOKIE, path="/console")
    return response


@router.get("")
async def dashboard(request: Request, services: ServicesDep, window: str = "hour") -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    overview = await services.operators.overview()
    queue = await services.operators.list(OperationFilter(needs_attention=True), limit=QUEUE_LIMIT)
    items = [admin_operation_json(s, with_history=False) for s in queue.items]
    failed = await services.operators.deliveries.count_failed()
    async with services.db.connection() as conn:
        inbox = await counts_by_state(conn)
    html = render(
        "dashboard.html",
        **await dashboard_charts(services, window),
        login=login,
        overview=overview,
        queue=items,
        more=queue.has_more,
        failed_deliveries=failed,
        inbox_needs_a_look=sum(inbox[state] for state in provider_events.NEEDS_A_LOOK),
    )
    return page(html)


@router.get("/operations/{operation_id}")
async def operationpage(
    operation_id: str, request: Request, services: ServicesDep, done: str | None = None
) -> Response:
    login = await current_login(request, services)
    if login is None:
        return redirect("/console/login")
    return await detail_page(services, login, operation_id, notice=_DONE.get(done or ""))


@router.post("/operations/{operation_id}/recheck")
async def recheck(
    operation_id: str,
    request: Request,
    services: ServicesDep,
    csrf: Annotated[str, Form(max_length=100)],
    confirmed: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    login = await current_login(request, services)
    if login is None or not csrf_ok(login, csrf):
        return redirect("/console/login")
    parsed = parse_operation_id(operation_id)
    if confirmed != "yes":
        detail = detail_json(await services.operators.detail(parsed))
        html = render(
            "confirm.html", **record_words(detail), login=login, op=detail, action="recheck"
        )
        return page(html)
    try:
        await services.operators.recheck(parsed, login.operator)
    except ProblemError as exc:
        return await detail_page(services, login, operation_id, error=exc)
    return redirect(f"/console/operations/{parsed}?done=rechecked")


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
    login = await current_login(request, services)
    if login is None or not csrf_ok(login, csrf):
        return redirect("/console/login")
    parsed = parse_operation_id(operation_id)
    values = {r.value for r in Resolution}
    if outcome not in values or not reason.strip():
        problem = _FormError("choose charged or not charged, and give a reason")
        return await detail_page(services, login, operation_id, error=problem)
    try:
        reason = check_reason(reason)
    except ProblemError as exc:
        # What the admin API refuses (a NUL, a control character), said on the form.
        return await detail_page(services, login, operation_id, error=exc)
    if confirmed != "yes":
        detail = detail_json(await services.operators.detail(parsed))
        html = render(
            "confirm.html",
            **record_words(detail),
            login=login,
            op=detail,
            action="resolve",
            outcome=outcome,
            reason=reason,
        )
        return page(html)
    try:
        await services.operators.resolve(parsed, Resolution(outcome), reason, login.operator)
    except ProblemError as exc:
        return await detail_page(services, login, operation_id, error=exc)
    return redirect(f"/console/operations/{parsed}?done=resolved")


class _FormError(ProblemError):
    status, code, title = 422, "VALIDATION_ERROR", "Form incomplete"


# The webhook pages (failed deliveries, redelivery) and the discrepancy queue's live in
# their own modules.
router.include_router(deliveries.router)
router.include_router(discrepancies.router)
router.include_router(search.router)
router.include_router(lists.router)
router.include_router(provider_events.router)
