"""Error bodies: `{"error": code, "detail": ...}`, the shape every error answer takes."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi.exceptions import RequestValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response


def error_response(
    status_code: int,
    error: str,
    detail: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    **extra: object,
) -> JSONResponse:
    """A JSON error answer with a stable `error` code."""
    body: dict[str, object] = {"error": error}
    if detail is not None:
        body["detail"] = detail
    body.update(extra)
    return JSONResponse(body, status_code=status_code, headers=headers)


def invalid_request(detail: str) -> JSONResponse:
    """`400 invalid_request`: the request was refused and nothing was charged."""
    return error_response(400, "invalid_request", detail)


def unavailable() -> JSONResponse:
    """`503` that promises the request was not processed, so the caller may retry at once."""
    return error_response(503, "unavailable", processed=False, headers={"Retry-After": "1"})


async def validation_error_handler(request: Request, exc: Exception) -> Response:
    """Answer FastAPI's validation errors with `400 invalid_request` instead of `422`.

    A provider answers 400 to a bad request, and the payments client reads 400 as "refused,
    nothing charged".
    """
    if not isinstance(exc, RequestValidationError):
        raise exc
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return invalid_request("; ".join(problems) or "invalid request")
