"""Errors as RFC 9457 problem details: the machinery, and the errors every package shares.

Every error the API answers with is a `ProblemError` subclass carrying its HTTP status, a
stable machine-readable `code` and a `title` as class attributes; one handler renders them
all as `application/problem+json` (`problem_response`, registered for `PROBLEMS`, which
names the base class, so a new subclass needs no registration). Expected business outcomes
never surface as 500s; an unexpected exception is logged and answered with a generic
`INTERNAL_ERROR` problem that reveals nothing.

This module holds the errors that are no one package's: a missing or unknown credential,
an invalid request, a body too large or not JSON, no such resource, a wrong method, the
database away. A package's own refusals live beside it, in its `errors.py` (as
`refunds/errors.py`), and import only `ProblemError` from here; docs/architecture.md lists
them. The console's form refusals stay in the console module that raises each.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app.observability.logging import current_request_id

if TYPE_CHECKING:
    # FastAPI itself only where an app is built (`install_error_handlers`): a process that
    # serves no HTTP, as the worker, raises and classifies these errors without importing it.
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError

PROBLEM_JSON = "application/problem+json"
logger = logging.getLogger("payments.errors")


def dump_json(body: Mapping[str, Any]) -> bytes:
    """The one JSON encoding of response bodies (compact, UTF-8).

    Text that cannot be UTF-8 (a lone surrogate echoed from a request's `\\ud800` escape)
    is written as a JSON escape instead, so no input makes rendering the answer fail.
    """
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()


def printable(text: str) -> str:
    """`text` made safe to echo in a message: lone surrogates become `\\udXXX` escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def problem_body(
    *, status: int, code: str, title: str, detail: str, **extra: Any
) -> dict[str, Any]:
    """A problem details object; `type` names the code (docs/api.md lists every code).

    Built while a request is handled, it carries that request's `request_id` (the
    `X-Request-Id` answered), also when it is stored to be replayed later.
    """
    body: dict[str, Any] = {
        "type": f"/problems/{code.lower().replace('_', '-')}",
        "title": title,
        "status": status,
        "code": code,
        "detail": detail,
    }
    body.update({k: v for k, v in extra.items() if v is not None})
    request_id = current_request_id()
    if request_id is not None:
        body.setdefault("request_id", request_id)
    return body


class ProblemError(Exception):
    """An error answered as problem+json with `status` and `code`."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "INTERNAL_ERROR"
    title: ClassVar[str] = "Internal error"

    def __init__(
        self,
        detail: str,
        *,
        operation_id: uuid.UUID | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.operation_id = operation_id
        self.headers = dict(headers or {})
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return problem_body(
            status=self.status,
            code=self.code,
            title=self.title,
            detail=self.detail,
            operation_id=str(self.operation_id) if self.operation_id else None,
            **self.extra,
        )

    def response(self) -> Response:
        return Response(
            content=dump_json(self.body()),
            status_code=self.status,
            headers=self.headers,
            media_type=PROBLEM_JSON,
        )


class Unauthenticated(ProblemError):
    status, code, title = 401, "UNAUTHENTICATED", "Missing or unknown API key"


class ValidationFailed(ProblemError):
    status, code, title = 422, "VALIDATION_ERROR", "Request invalid"


class PayloadTooLarge(ProblemError):
    status, code, title = 413, "PAYLOAD_TOO_LARGE", "Request body too large"


class UnsupportedMediaType(ProblemError):
    status, code, title = 415, "UNSUPPORTED_MEDIA_TYPE", "Request body must be JSON"


class NotFound(ProblemError):
    status, code, title = 404, "NOT_FOUND", "Not found"


class MethodNotAllowed(ProblemError):
    status, code, title = 405, "METHOD_NOT_ALLOWED", "Method not allowed"


class ServiceUnavailable(ProblemError):
    status, code, title = 503, "SERVICE_UNAVAILABLE", "Service temporarily unavailable"


# SQLSTATE classes that mean "try again": connection trouble (08), serialization failure and
# deadlock (40), resources (53), lock/statement timeouts and shutdowns (55P03, 57014, 57P*),
# and a write on a server that is no longer the primary (25006, read-only transaction: a
# switchover demoted it; the pool then reconnects to the one that accepts writes).
_RETRYABLE_SQLSTATE_PREFIXES = ("08", "25006", "40", "53", "55P03", "57014", "57P")


def is_transient_database_error(exc: BaseException) -> bool:
    """True for database errors a retry may clear (never for errors in our own SQL)."""
    # Connection trouble and a pool with no free connection are retryable as a whole.
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)):
        return True
    if isinstance(exc, psycopg.Error):
        sqlstate = exc.sqlstate or ""
        return sqlstate.startswith(_RETRYABLE_SQLSTATE_PREFIXES)
    return False


def _validation_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    return [
        {
            "field": ".".join(str(p) for p in err["loc"] if p not in ("body", "query", "path")),
            "message": str(err["msg"]),
        }
        for err in exc.errors()
    ]


def internal_error_body(*, keyed: bool) -> bytes:
    """The body of a 500: it reveals nothing but the request's id.

    Only a request sent with an Idempotency-Key (`keyed`) is told that retrying with the
    same key is safe; any other (a read, the admin API, the console) is told no more than
    that the error is logged under its request id.
    """
    detail = "an unexpected error occurred; " + (
        "retrying with the same Idempotency-Key is safe"
        if keyed
        else "it is logged under this request_id"
    )
    return dump_json(
        problem_body(status=500, code="INTERNAL_ERROR", title="Internal error", detail=detail)
    )


# What `problem_response` answers: the API's own errors and the database's.
PROBLEMS: tuple[type[Exception], ...] = (ProblemError, psycopg.Error, PoolTimeout)


def problem_response(exc: Exception) -> Response:
    """The answer to an error of `PROBLEMS`, on FastAPI's routes and the fast ones alike.

    A `ProblemError` answers as itself; a database error that a retry may clear is a 503;
    any other database error is raised again, to be answered 500 by the request observer.
    """
    if isinstance(exc, ProblemError):
        return exc.response()
    if not is_transient_database_error(exc):
        raise exc
    # The database is away or refused this transaction. Nothing half-done is exposed: a
    # request that owned an operation left it leased, and recovery or a retry with the same
    # key carries it on.
    logger.warning("database unavailable: %s", type(exc).__name__)
    return ServiceUnavailable(
        "the database is temporarily unavailable; retry with the same Idempotency-Key",
        headers={"retry-after": "1"},
    ).response()


def install_error_handlers(app: FastAPI) -> None:
    """Render every error the app can raise as problem+json."""
    from fastapi.exceptions import RequestValidationError

    async def on_problem(request: Request, exc: Exception) -> Response:
        return problem_response(exc)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = _validation_errors(exc)
        return ValidationFailed("request parameters are invalid", errors=errors).response()

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 405:
            return MethodNotAllowed(f"{request.method} is not allowed here").response()
        if exc.status_code == 404:
            return NotFound("no such resource").response()
        body = problem_body(
            status=exc.status_code,
            code="HTTP_ERROR",
            title="HTTP error",
            detail=str(exc.detail),
        )
        return Response(dump_json(body), status_code=exc.status_code, media_type=PROBLEM_JSON)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        body = internal_error_body(keyed="idempotency-key" in request.headers)
        return Response(body, status_code=500, media_type=PROBLEM_JSON)

    for kind in PROBLEMS:
        app.add_exception_handler(kind, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
