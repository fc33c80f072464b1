"""The console's form posts, capped before anything parses them.

FastAPI reads a route's whole form (`Form(...)` parameters) before the handler, or any of
its checks, runs: unbounded, a login attempt could make the process buffer and parse
megabytes of fields. As the JSON bodies are (`app/http/body.py`), every console request
with a body is checked here first, while it streams in:

- its media type is `application/x-www-form-urlencoded` (the console's forms send nothing
  else), or `415 UNSUPPORTED_MEDIA_TYPE`;
- it is at most `MAX_FORM_BYTES` long (8 KiB; a declared length over it is refused
  unread), or `413 PAYLOAD_TOO_LARGE`;
- it has at most `MAX_FORM_FIELDS` fields (the console's largest form has 4), or
  `400 TOO_MANY_FORM_FIELDS`.

A form within the limits is handed on whole, as if it had just arrived.
"""

from __future__ import annotations

import re

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PayloadTooLarge, ProblemError

MAX_FORM_BYTES = 8 * 1024
MAX_FORM_FIELDS = 10
FORM_TYPE = "application/x-www-form-urlencoded"
_BODILESS = frozenset({"GET", "HEAD", "OPTIONS"})
# ASCII digits only: str.isdigit() also accepts digits int() cannot read.
_DIGITS = re.compile(r"[0-9]{1,20}")


class UnsupportedFormType(ProblemError):
    status, code, title = 415, "UNSUPPORTED_MEDIA_TYPE", "Request body must be a form"


class TooManyFormFields(ProblemError):
    status, code, title = 400, "TOO_MANY_FORM_FIELDS", "Too many form fields"


class _Refused(Exception):
    def __init__(self, problem: ProblemError) -> None:
        self.problem = problem


def _console_path(path: str) -> bool:
    path = "/" + path.lstrip("/")
    return path == "/console" or path.startswith("/console/")


async def _read_form(scope: Scope, receive: Receive) -> bytes:
    """The whole body, checked as it arrives; `_Refused` with the problem otherwise."""
    headers = Headers(scope=scope)
    media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != FORM_TYPE:
        raise _Refused(UnsupportedFormType(f"send the form as Content-Type: {FORM_TYPE}"))
    too_large = PayloadTooLarge(f"the form is larger than {MAX_FORM_BYTES} bytes")
    declared = headers.get("content-length")
    if declared is not None and _DIGITS.fullmatch(declared) and int(declared) > MAX_FORM_BYTES:
        raise _Refused(too_large)
    chunks: list[bytes] = []
    size = separators = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Refused(PayloadTooLarge("the client went away"))
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise _Refused(too_large)
        separators += chunk.count(b"&")
        if separators + 1 > MAX_FORM_FIELDS:
            raise _Refused(TooManyFormFields(f"a form has at most {MAX_FORM_FIELDS} fields"))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def cap_console_forms(app: ASGIApp) -> ASGIApp:
    """`app`, with the console's request bodies checked before it sees them."""

    async def capped(scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in _BODILESS
            or not _console_path(scope["path"])
        ):
            await app(scope, receive, send)
            return
        try:
            body = await _read_form(scope, receive)
        except _Refused as refused:
            await refused.problem.response()(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return capped
