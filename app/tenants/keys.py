"""API keys: generated with 256 bits of randomness, stored only as a SHA-256 hash.

A fast hash is the right tool here (unlike passwords): the key is random and long, so the
hash cannot be reversed by guessing, and lookups by hash stay a single index probe.
"""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "sk_"
# Characters of a key kept in clear to tell keys apart: the scheme and 9 random characters
# (54 of the key's 256 bits), far too few to help guess the rest.
DISPLAY_PREFIX_LENGTH = 12


def generate_api_key() -> str:
    """A new API key, shown to its owner once."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_key(api_key: str) -> str:
    """The stored form of an API key."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def display_prefix(api_key: str) -> str:
    """The part of a key shown in listings."""
    return api_key[:DISPLAY_PREFIX_LENGTH]
