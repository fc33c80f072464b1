"""Reading a JSON request body strictly: size limit, media type, no ambiguity.

Refused here, before anything is stored: bodies over the limit (413), bodies that are not
declared as JSON (415), and JSON that is malformed, not an object, has duplicate member names
or non-finite numbers (422).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from app.errors import PayloadTooLarge, UnsupportedMediaType, ValidationFailed

MAX_BODY_BYTES = 64 * 1024


def _is_json(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValidationFailed(
                f"member {key!r} appears more than once",
                errors=[{"field": key, "message": "duplicate member"}],
            )
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValidationFailed(f"{name} is not valid JSON", errors=[{"field": "", "message": name}])


async def read_json_object(request: Request, *, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The request body as a JSON object, or a problem explaining why not."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the body is larger than {limit} bytes")
    if not _is_json(request.headers.get("content-type", "")):
        raise UnsupportedMediaType("send the body as Content-Type: application/json")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is larger than {limit} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValidationFailed(
            f"the body is not valid JSON: {exc}",
            errors=[{"field": "", "message": "malformed JSON"}],
        ) from None
    if not isinstance(data, dict):
        raise ValidationFailed(
            "the body must be a JSON object",
            errors=[{"field": "", "message": "expected an object"}],
        )
    return data
