"""A command's envelope, read: its type, its credentials, its key, its JSON body.

A command is an AMQP message shaped like the HTTP request it stands for:

    type (the property)     the operation: `create_payment`, `create_refund` (`kinds.py`)
    headers                 `authorization: Bearer <api key>`, `idempotency-key`, and what
                            the HTTP path names (`payment-id` for a refund); `prefer:
                            wait=N` as on HTTP; names in any case, values strings
    body                    the HTTP request's JSON body, as it would be posted

Reading it checks what the HTTP edge checks before a route's own validation, with the same
rules (the key's syntax, the body's size, strict JSON), cheapest first; the tenant's key is
looked up later, by the handler. What cannot be read is `Refused`, with a stable `Reason`
(the dead letter's `x-payments-reject-reason`) and the problem HTTP would answer. Nothing
here touches the broker or the database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.broker.errors import MalformedCommand, UnknownCommand
from app.errors import PayloadTooLarge, ProblemError, Unauthenticated, ValidationFailed
from app.http.auth import bearer_token
from app.http.body import parse_json_object
from app.http.prefer import preferred_wait_s
from app.idempotency.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing
from app.idempotency.flow import MAX_WAIT_S
from app.idempotency.keys import parse_idempotency_key
from app.tenants.keys import could_be_api_key


class Reason(StrEnum):
    """Why a command was dead-lettered: the value of its `x-payments-reject-reason`."""

    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNKNOWN_COMMAND = "unknown_command"
    MALFORMED_COMMAND = "malformed_command"
    UNAUTHENTICATED = "unauthenticated"
    IDEMPOTENCY_KEY_MISSING = "idempotency_key_missing"
    IDEMPOTENCY_KEY_INVALID = "idempotency_key_invalid"
    MALFORMED_JSON = "malformed_json"


class Refused(Exception):
    """A message that is no command this service can run, and why."""

    def __init__(self, reason: Reason, problem: ProblemError) -> None:
        super().__init__(f"{reason}: {problem.detail}")
        self.reason = reason
        self.problem = problem


@dataclass(frozen=True)
class Command:
    """A command's envelope, read; its body parsed but not yet validated."""

    type: str
    api_key: str
    idempotency_key: str
    # What the HTTP path names, by header (`payment-id`), for the command types that need it.
    path: Mapping[str, str]
    data: dict[str, Any]
    wait_s: float


def read_command(
    *,
    body: bytes,
    type: str | None,
    headers: Mapping[str, object] | None,
    path_headers: Mapping[str, Sequence[str]],
    max_body_bytes: int,
) -> Command:
    """The command `body`, `type` and `headers` make, or `Refused`.

    `path_headers` gives, for each known command type, the headers it must carry in place of
    the HTTP path's ids: a type missing from it is unknown.
    """
    if len(body) > max_body_bytes:
        raise Refused(
            Reason.PAYLOAD_TOO_LARGE,
            PayloadTooLarge(f"the body is larger than {max_body_bytes} bytes"),
        )
    if type is None or type not in path_headers:
        known = ", ".join(sorted(path_headers))
        raise Refused(
            Reason.UNKNOWN_COMMAND,
            UnknownCommand(f"the message's type must name a command: one of {known}"),
        )
    named = _by_name(headers or {})
    api_key = _api_key(named.get("authorization", []))
    try:
        key = parse_idempotency_key(named.get("idempotency-key", []))
    except IdempotencyKeyMissing as exc:
        raise Refused(Reason.IDEMPOTENCY_KEY_MISSING, exc) from None
    except IdempotencyKeyInvalid as exc:
        raise Refused(Reason.IDEMPOTENCY_KEY_INVALID, exc) from None
    try:
        data = parse_json_object(body)
    except ValidationFailed as exc:
        raise Refused(Reason.MALFORMED_JSON, exc) from None
    path = {}
    for name in path_headers[type]:
        values = named.get(name, [])
        if len(values) != 1:
            raise Refused(
                Reason.MALFORMED_COMMAND,
                MalformedCommand(f"a {type} command carries one `{name}` header"),
            )
        path[name] = values[0]
    return Command(
        type=type,
        api_key=api_key,
        idempotency_key=key,
        path=path,
        data=data,
        wait_s=preferred_wait_s(named.get("prefer", []), cap_s=MAX_WAIT_S),
    )


def _by_name(headers: Mapping[str, object]) -> dict[str, list[str]]:
    """Header values by lower-cased name (AMQP's are case-sensitive, HTTP's are not).

    A value that is not text cannot be a value HTTP would carry: it is kept as an empty
    string, which every header's own rule refuses.
    """
    named: dict[str, list[str]] = {}
    for name, value in headers.items():
        if isinstance(value, bytes):
            try:
                value = value.decode("ascii")
            except UnicodeDecodeError:
                value = ""
        named.setdefault(name.lower(), []).append(value if isinstance(value, str) else "")
    return named


def _api_key(values: Sequence[str]) -> str:
    """The API key in the one `authorization` header, shaped as a key of ours; else refused
    with no lookup (a made-up token costs no database round trip)."""
    token = bearer_token(values[0]) if len(values) == 1 else None
    if token is None:
        raise Refused(
            Reason.UNAUTHENTICATED,
            Unauthenticated("send the tenant's key as `authorization: Bearer <api key>`"),
        )
    if not could_be_api_key(token):
        raise Refused(Reason.UNAUTHENTICATED, Unauthenticated("the API key is not valid"))
    return token
