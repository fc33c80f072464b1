"""The ids `python -m bench.search` seeds its operations, payments and refunds with: in SQL
for the seed and for the statements that join on them, in Python for the searches to draw.

Row g of kind `prefix` ('op', 'pay', 'ref') has the md5 of `prefix || g` with its version
digit set to 4: a version 4 id, as every row had before the service made UUIDv7s
(`app/ids.py`). An md5 taken as it is has a 7 in the version digit and the RFC variant one
time in 64, and then reads as a UUIDv7 of a random moment: a read by that id looks only at
the days around that moment, and the operators' search did not find its record. A version
4 id tells no time: its read looks in every day's partition.
"""

from __future__ import annotations

import hashlib
import uuid

# The version digit's place in the 32 hex digits (the 13th, counting from 1 as SQL does).
_VERSION_DIGIT = 13


def seeded_id_sql(prefix: str, row: str = "g") -> str:
    """SQL for the id of row `row` (an integer expression) of kind `prefix`."""
    return f"overlay(md5('{prefix}' || {row}) placing '4' from {_VERSION_DIGIT})::uuid"


def seeded_id(prefix: str, row: int) -> uuid.UUID:
    """The id of row `row` of kind `prefix`, as `seeded_id_sql` makes it."""
    digest = hashlib.md5(f"{prefix}{row}".encode()).hexdigest()
    return uuid.UUID(digest[: _VERSION_DIGIT - 1] + "4" + digest[_VERSION_DIGIT:])
