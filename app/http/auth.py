"""Reading the API key from `Authorization: Bearer <key>`."""

from __future__ import annotations

# A key is far shorter than this; anything longer is not worth hashing or looking up.
MAX_API_KEY_LENGTH = 200


def bearer_token(authorization: str | None) -> str | None:
    """The key in an `Authorization` header value, or None when there is no usable one.

    Only the `Bearer` scheme (any case) counts, and only a token of visible ASCII characters
    (0x21-0x7E) of sane length: anything else cannot be a key we issued.
    """
    if authorization is None:
        return None
    scheme, _, token = authorization.strip(" \t").partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip(" \t")
    if not token or len(token) > MAX_API_KEY_LENGTH:
        return None
    if not all(0x21 <= ord(ch) <= 0x7E for ch in token):
        return None
    return token
