"""A provider's notification signature: the `Provider-Signature` header, checked.

    Provider-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>

One `v1` per secret the provider signs with (two while it rotates one); the HMAC key is
the whole secret string's UTF-8 bytes (`whsec_...`). Members other than `t` and `v1` are
left alone (a provider may add schemes). An event is authentic when any `v1` matches any
live secret of the provider: every pair is compared, each in constant time, so the time
taken says nothing about which came close. Then its timestamp must be within
`TOLERANCE_S` of now, either way: a recorded event replayed later is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.provider_events.errors import ProviderEventSignatureInvalid, ProviderEventStale

HEADER = "provider-signature"
# How far a signature's timestamp may be from now, in seconds, past or future.
TOLERANCE_S = 300
# `v1` members one header may carry: a rotation needs two; the rest only costs HMACs.
MAX_SIGNATURES = 8

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class Signed:
    """A parsed header: when it was signed, and each `v1` digest as bytes."""

    timestamp: int
    digests: tuple[bytes, ...]


def parse(values: Sequence[str]) -> Signed:
    """The header's `t` and `v1` members (`values`: every `Provider-Signature` sent)."""
    if not values:
        raise ProviderEventSignatureInvalid("no Provider-Signature header")
    if len(values) > 1:
        raise ProviderEventSignatureInvalid("Provider-Signature sent more than once")
    timestamps: list[int] = []
    digests: list[bytes] = []
    for member in values[0].split(","):
        name, equals, value = member.strip().partition("=")
        if not equals:
            raise _malformed()
        if name == "t":
            if not _TIMESTAMP.fullmatch(value):
                raise _malformed()
            timestamps.append(int(value))
        elif name == "v1":
            if not _DIGEST.fullmatch(value):
                raise _malformed()
            digests.append(bytes.fromhex(value))
    if len(timestamps) != 1 or not digests or len(digests) > MAX_SIGNATURES:
        raise _malformed()
    return Signed(timestamp=timestamps[0], digests=tuple(digests))


def digest(secret: str, timestamp: int, body: bytes) -> bytes:
    """HMAC-SHA256 of `"<timestamp>.<body>"` under `secret`'s bytes."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).digest()


def verify(signed: Signed, body: bytes, secrets: Sequence[str], *, now: float) -> None:
    """Refuse unless a `v1` matches one of `secrets` and the timestamp is recent enough."""
    expected = [digest(secret, signed.timestamp, body) for secret in secrets]
    matched = False
    for candidate in signed.digests:
        for one in expected:
            # No short cut: every pair is compared, whatever came before.
            matched |= hmac.compare_digest(candidate, one)
    if not matched:
        raise ProviderEventSignatureInvalid("no signature matches a live secret")
    if abs(now - signed.timestamp) > TOLERANCE_S:
        raise ProviderEventStale(
            f"signed at {signed.timestamp}, more than {TOLERANCE_S} s from now (a replay, "
            "or the sender's clock is off)"
        )


def _malformed() -> ProviderEventSignatureInvalid:
    return ProviderEventSignatureInvalid(
        "Provider-Signature must be t=<unix seconds>,v1=<64 hex digits>[,v1=...]"
    )
