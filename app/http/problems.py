"""OpenAPI descriptions of the problem+json answers, shared by the routers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Problem(BaseModel):
    """RFC 9457 problem details with a stable `code`."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    code: str = Field(description="Stable machine-readable error code")
    detail: str
    operation_id: str | None = None
    payment_id: str | None = None
    refund_id: str | None = None
    request_id: str | None = Field(
        default=None,
        description="The `X-Request-Id` of the request that produced this problem",
    )
    errors: list[dict[str, str]] | None = Field(
        default=None, description="For VALIDATION_ERROR: each failing field and why"
    )


def problem(description: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A `responses=` entry for a problem answer."""
    entry: dict[str, Any] = {
        "description": description,
        "content": {"application/problem+json": {"schema": Problem.model_json_schema()}},
    }
    if headers:
        entry["headers"] = {
            name: {"description": text, "schema": {"type": "string"}}
            for name, text in headers.items()
        }
    return entry


UNAUTHENTICATED: dict[int | str, dict[str, Any]] = {
    401: problem("UNAUTHENTICATED: missing or unknown API key")
}
RATE_LIMITED: dict[int | str, dict[str, Any]] = {
    429: problem(
        "RATE_LIMITED: the tenant is over its request rate, or the client's address has sent "
        "too many requests without a valid API key (per API process); nothing done, retry "
        "after `Retry-After`",
        {"Retry-After": "seconds to wait, a whole number, at least 1"},
    )
}
# What authenticating a tenant can answer, on every tenant route.
TENANT_AUTH: dict[int | str, dict[str, Any]] = {**UNAUTHENTICATED, **RATE_LIMITED}
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: problem("NOT_FOUND: no such resource for this tenant")
}
VALIDATION: dict[int | str, dict[str, Any]] = {
    422: problem("VALIDATION_ERROR: invalid parameters; `errors` says which and why")
}
