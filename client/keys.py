"""Idempotency keys: one UUIDv7 per logical operation.

A UUIDv7 starts with the Unix time in milliseconds, so keys sort by creation time (handy in
logs and in a caller's own table of pending payments) while 74 random bits keep them unique.
Layout, most significant bit first:

    48 bits  unix_ts_ms   milliseconds since 1970-01-01 UTC
     4 bits  version      0b0111
    12 bits  rand_a       random
     2 bits  variant      0b10
    62 bits  rand_b       random
"""

from __future__ import annotations

import os
import time
import uuid

MAX_KEY_LENGTH = 255
_TIMESTAMP_MASK = (1 << 48) - 1
_RAND_A_MASK = (1 << 12) - 1
_RAND_B_MASK = (1 << 62) - 1


def uuid7(*, unix_ms: int | None = None, random_bytes: bytes | None = None) -> uuid.UUID:
    """A version 7 UUID for `unix_ms` (default: now) and 10 random bytes (default: fresh).

    The arguments exist for tests; callers normally pass neither.
    """
    ms = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    if not 0 <= ms <= _TIMESTAMP_MASK:
        raise ValueError("unix_ms must fit in 48 bits")
    rand = os.urandom(10) if random_bytes is None else random_bytes
    if len(rand) != 10:
        raise ValueError("random_bytes must be 10 bytes long")
    rand_a = int.from_bytes(rand[:2], "big") & _RAND_A_MASK
    rand_b = int.from_bytes(rand[2:], "big") & _RAND_B_MASK
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return uuid.UUID(int=value)


def uuid7_unix_ms(value: uuid.UUID) -> int:
    """The millisecond timestamp a UUIDv7 was made at."""
    if value.version != 7:
        raise ValueError(f"{value} is not a version 7 UUID")
    return value.int >> 80


def new_idempotency_key() -> str:
    """A fresh key for one logical operation: a UUIDv7 in its canonical text form."""
    return str(uuid7())


def check_idempotency_key(key: str) -> str:
    """`key` if the API accepts it (1 to 255 visible ASCII characters); else ValueError."""
    if not isinstance(key, str) or not key:
        raise ValueError("an idempotency key is a non-empty string")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"an idempotency key has at most {MAX_KEY_LENGTH} characters")
    if not all(0x21 <= ord(ch) <= 0x7E for ch in key):
        raise ValueError("an idempotency key holds only visible ASCII characters (0x21-0x7E)")
    return key


def idempotency_key_header(key: str) -> str:
    """The header value for `key`: a structured-field string, so any visible key is exact."""
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
