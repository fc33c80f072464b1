"""Parsing the `Idempotency-Key` header.

Two forms are accepted: the structured-field string (`"abc"`, with `\\"` and `\\\\` escapes)
and a bare token (`abc`). After unquoting, a key is 1 to 255 visible ASCII characters
(0x21-0x7E). Both forms of the same key name the same key.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.idempotency.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing

MAX_KEY_LENGTH = 255


def _visible_ascii(value: str) -> bool:
    return all(0x21 <= ord(ch) <= 0x7E for ch in value)


def _unquote(value: str) -> str:
    """Parse a structured-field string; raise `IdempotencyKeyInvalid` if it is not one."""
    chars: list[str] = []
    i = 1
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in ('"', "\\"):
                raise IdempotencyKeyInvalid('only \\" and \\\\ may be escaped in a quoted key')
            chars.append(value[i + 1])
            i += 2
            continue
        if ch == '"':
            if i != len(value) - 1:
                raise IdempotencyKeyInvalid("a quoted key must be one string and nothing more")
            return "".join(chars)
        chars.append(ch)
        i += 1
    raise IdempotencyKeyInvalid("a quoted key must end with a quote")


def parse_idempotency_key(values: Sequence[str]) -> str:
    """The key named by the request's `Idempotency-Key` header values."""
    if not values:
        raise IdempotencyKeyMissing("send an Idempotency-Key header with every POST /payments")
    if len(values) > 1:
        raise IdempotencyKeyInvalid("the Idempotency-Key header was sent more than once")
    raw = values[0].strip(" \t")
    key = _unquote(raw) if raw.startswith('"') else raw
    if not key:
        raise IdempotencyKeyInvalid("the Idempotency-Key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise IdempotencyKeyInvalid(f"the Idempotency-Key is longer than {MAX_KEY_LENGTH}")
    if not _visible_ascii(key):
        raise IdempotencyKeyInvalid(
            "the Idempotency-Key may hold only visible ASCII characters (0x21-0x7E)"
        )
    return key
