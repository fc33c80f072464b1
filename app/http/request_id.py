"""`X-Request-Id`: the caller's id for a request when it is sane, else one made here."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

HEADER = "x-request-id"
MAX_LENGTH = 128

# Visible ASCII only: the id goes into response headers, logs and problem bodies verbatim.
_SANE = re.compile(rb"[\x21-\x7e]{1,%d}" % MAX_LENGTH)


def request_id(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The caller's `X-Request-Id` if it sent exactly one sane value, else a new UUID."""
    values = [value for name, value in headers if name.lower() == HEADER.encode()]
    if len(values) == 1 and _SANE.fullmatch(values[0]):
        return values[0].decode("ascii")
    return str(uuid.uuid4())
