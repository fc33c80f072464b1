"""Query strings: a parameter a list endpoint does not know is refused, not ignored.

A misspelt `after=` silently ignored would restart a reader at the beginning of the feed.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request

from app.errors import ValidationFailed


def only_query(*names: str) -> Callable[[Request], Coroutine[Any, Any, None]]:
    """A dependency refusing (422) any query parameter but `names`."""
    allowed = frozenset(names)

    async def check(request: Request) -> None:
        unknown = sorted({key for key in request.query_params if key not in allowed})
        if unknown:
            raise ValidationFailed(
                "unknown query parameters",
                errors=[{"field": name, "message": "unknown parameter"} for name in unknown],
            )

    return check
