"""API keys: generated with 256 bits of randomness, stored only as a SHA-256 hash.

A fast hash is the right tool here (unlike passwords): the key is random and long, so the
hash cannot be reversed by guessing, and lookups by hash stay a single index probe.
"""

from __future__ import annotations

import hashlib
import re
import secrets

KEY_PREFIX = "sk_"
# What `generate_api_key` makes: the prefix, then 32 random bytes in URL-safe base64 without
# its padding, 43 characters. The last one carries 4 bits of the key and 2 zero bits, so only
# 16 characters can end a key. Anything else is no key of ours and is refused unlooked-up.
_KEY_SHAPE = re.compile(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{42}[AEIMQUYcgkosw048]")
KEY_LENGTH = len(KEY_PREFIX) + 43
# Characters of a key kept in clear to tell keys apart: the scheme and 9 random characters
# (54 of the key's 256 bits), far too few to help guess the rest.
DISPLAY_PREFIX_LENGTH = 12


def generate_api_key() -> str:
    """A new API key, shown to its owner once."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def could_be_api_key(token: str) -> bool:
    """Whether `token` has the shape of a key `generate_api_key` made (and so is worth a
    lookup): a flood of made-up tokens costs no database round trip."""
    return _KEY_SHAPE.fullmatch(token) is not None


def hash_api_key(api_key: str) -> str:
    """The stored form of an API key."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def display_prefix(api_key: str) -> str:
    """The part of a key shown in listings."""
    return api_key[:DISPLAY_PREFIX_LENGTH]
