"""What every console route shares: the session from its cookie, the CSRF check, pages and
redirects with the console's security headers, and the operation page (the place most
actions return to)."""

from __future__ import annotations

import hmac
import uuid
from typing import Any

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from app.admin import repository as admin_auth
from app.admin.rows import ConsoleLogin
from app.admin.views import detail_json
from app.console.pages import render
from app.dependencies import Services
from app.errors import NotFound, ProblemError
from app.http.auth import MAX_API_KEY_LENGTH

SESSION_COOKIE = "payments_console"
HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


# What an operator says happened at the provider, in the words of each kind's record (the
# form's values stay the API's `charged` and `not_charged`, for every kind).
OUTCOME_WORDS = {
    "charge": ("charged", "not charged"),
    "refund": ("refunded", "not refunded"),
    "capture": ("captured", "not captured"),
    "void": ("voided", "not voided"),
}


def record_words(detail: dict[str, Any]) -> dict[str, Any]:
    """What the operation page and its confirmation call what the provider keeps for this
    kind of operation (`record_name`: "charge", "refund", "capture", "void"), the live
    lookup's record of it (`record`), and the two resolutions (`outcome_words`)."""
    provider = detail["provider"] or {}
    names = [name for name in provider if name not in ("reachable", "error")]
    name = names[0] if names else "charge"
    made, not_made = OUTCOME_WORDS.get(name, ("made", "not made"))
    return {
        "record_name": name,
        "record": provider.get(name),
        "outcome_words": {"charged": made, "not_charged": not_made},
    }


def page(html: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=HEADERS)


async def current_login(request: Request, services: Services) -> ConsoleLogin | None:
    """The session the request's cookie names, if it is live."""
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id or len(session_id) > MAX_API_KEY_LENGTH:
        return None
    async with services.db.connection() as conn:
        return await admin_auth.find_session(conn, session_id)


def csrf_ok(login: ConsoleLogin, sent: str) -> bool:
    """The form's CSRF token is the session's (compared in constant time)."""
    return hmac.compare_digest(login.csrf_token.encode(), sent.encode())


def parse_operation_id(operation_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(operation_id)
    except ValueError:
        raise NotFound("no such operation") from None


async def detail_page(
    services: Services,
    login: ConsoleLogin,
    operation_id: str,
    *,
    notice: str | None = None,
    error: ProblemError | None = None,
) -> Response:
    """The operation page, with a notice or the problem an action ran into."""
    try:
        detail = detail_json(await services.operators.detail(parse_operation_id(operation_id)))
    except NotFound:
        return page(render("missing.html", login=login), 404)
    # A payment's attempts left behind, by the failover transition that left them.
    attempts = (detail["payment"] or {}).get("attempts", [])
    moved = {a["failover"]["transition_id"]: a for a in attempts if a.get("failover")}
    html = render(
        "operation.html",
        **record_words(detail),
        login=login,
        op=detail,
        moved=moved,
        notice=notice,
        error=error,
    )
    return page(html, error.status if error is not None else 200)
