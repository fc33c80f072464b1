"""Reading a JSON request body strictly: size limit, media type, no ambiguity.

Refused here, before anything is stored: bodies over the limit (413), bodies that are not
declared as JSON (415), and JSON that is malformed, not an object, has duplicate member names
or non-finite numbers (422).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from app.errors import PayloadTooLarge, UnsupportedMediaType, ValidationFailed, printable

if TYPE_CHECKING:
    # FastAPI only where a request is read: `parse_json_object` serves the broker's consumer
    # too (app/broker/), which serves no HTTP and need not load it.
    from fastapi import Request

MAX_BODY_BYTES = 64 * 1024

# ASCII digits only: str.isdigit() also accepts digits int() cannot read ("²").
_DIGITS = re.compile(r"[0-9]{1,20}")


def _is_json(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            # The name is echoed back: make it encodable whatever the client escaped into it.
            name = printable(key)
            raise ValidationFailed(
                f"member {name!r} appears more than once",
                errors=[{"field": name, "message": "duplicate member"}],
            )
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValidationFailed(f"{name} is not valid JSON", errors=[{"field": "", "message": name}])


async def read_json_object(request: Request, *, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The request body as a JSON object, or a problem explaining why not."""
    declared = request.headers.get("content-length")
    if declared is not None and _DIGITS.fullmatch(declared) and int(declared) > limit:
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
    return parse_json_object(b"".join(chunks))


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """`raw` as a JSON object without ambiguity, or `ValidationFailed` explaining why not."""
    try:
        text = raw.decode("utf-8")
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationFailed(
            f"the body is not valid JSON: {exc}",
            errors=[{"field": "", "message": "malformed JSON"}],
        ) from None
    except (ValueError, RecursionError):
        # Too deeply nested, or an integer past Python's digit limit: never a money request.
        raise ValidationFailed(
            "the body is not JSON this API can read (too deeply nested or a number too long)",
            errors=[{"field": "", "message": "malformed JSON"}],
        ) from None
    if not isinstance(data, dict):
        raise ValidationFailed(
            "the body must be a JSON object",
            errors=[{"field": "", "message": "expected an object"}],
        )
    return data
