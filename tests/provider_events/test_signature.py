"""The `Provider-Signature` check on its own: the header's form, every `v1` against every
live secret, and the tolerance's edges, against signatures made from the scheme itself."""

from __future__ import annotations

import pytest

from app.provider_events.errors import ProviderEventSignatureInvalid, ProviderEventStale
from app.provider_events.signature import MAX_SIGNATURES, TOLERANCE_S, parse, verify
from tests.support.factories.provider_events import new_secret, signature

BODY = b'{"id": "evt_1"}'
T = 1_800_000_000


def test_a_header_reads_as_its_timestamp_and_digests() -> None:
    one, two = "01" * 32, "AB" * 32

    signed = parse([f" t={T} , v1={one},v0=ignored , v1={two}"])

    assert signed.timestamp == T
    assert signed.digests == (bytes.fromhex(one), bytes.fromhex(two))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("t", id="no-equals"),
        pytest.param(f"t={T}", id="no-v1"),
        pytest.param("v1=" + "0" * 64, id="no-t"),
        pytest.param(f"t={T},t={T},v1=" + "0" * 64, id="t-twice"),
        pytest.param("t=-5,v1=" + "0" * 64, id="t-negative"),
        pytest.param("t=\uff11\uff12,v1=" + "0" * 64, id="t-other-digits"),
        pytest.param(f"t={T},v1=" + "0" * 63, id="v1-short"),
        pytest.param(f"t={T},v1=" + "g" * 64, id="v1-not-hex"),
        pytest.param(f"t={T}" + ",v1=" + "0" * 64 * (MAX_SIGNATURES + 1), id="v1-long"),
        pytest.param(f"t={T}" + f",v1={'0' * 64}" * (MAX_SIGNATURES + 1), id="too-many-v1"),
    ],
)
def test_a_malformed_header_is_refused(value: str) -> None:
    with pytest.raises(ProviderEventSignatureInvalid):
        parse([value])


def test_a_missing_or_repeated_header_is_refused() -> None:
    good = signature([new_secret()], BODY, timestamp=T)
    with pytest.raises(ProviderEventSignatureInvalid, match="no Provider-Signature"):
        parse([])
    with pytest.raises(ProviderEventSignatureInvalid, match="more than once"):
        parse([good, good])


def test_any_v1_matching_any_live_secret_is_authentic() -> None:
    old, new, other = new_secret(), new_secret(), new_secret()
    live = [old, new]

    for signers in ([old], [new], [other, new], [new, old]):
        verify(parse([signature(signers, BODY, timestamp=T)]), BODY, live, now=T)

    for signers in ([other], []):
        header = signature(signers, BODY, timestamp=T) if signers else f"t={T},v1={'0' * 64}"
        with pytest.raises(ProviderEventSignatureInvalid):
            verify(parse([header]), BODY, live, now=T)


def test_the_signature_covers_the_timestamp_and_every_byte() -> None:
    secret = new_secret()
    header = signature([secret], BODY, timestamp=T)
    moved = header.replace(f"t={T}", f"t={T + 1}")

    with pytest.raises(ProviderEventSignatureInvalid):
        verify(parse([header]), BODY + b" ", [secret], now=T)
    with pytest.raises(ProviderEventSignatureInvalid):
        verify(parse([moved]), BODY, [secret], now=T)


def test_a_provider_without_secrets_accepts_nothing() -> None:
    header = signature([new_secret()], BODY, timestamp=T)
    with pytest.raises(ProviderEventSignatureInvalid):
        verify(parse([header]), BODY, [], now=T)


@pytest.mark.parametrize("off_s", [-TOLERANCE_S, TOLERANCE_S])
def test_a_timestamp_within_the_tolerance_is_accepted(off_s: int) -> None:
    secret = new_secret()
    verify(parse([signature([secret], BODY, timestamp=T)]), BODY, [secret], now=T + off_s)


@pytest.mark.parametrize("off_s", [-TOLERANCE_S - 1, TOLERANCE_S + 1])
def test_a_timestamp_past_the_tolerance_is_stale(off_s: int) -> None:
    secret = new_secret()
    with pytest.raises(ProviderEventStale):
        verify(parse([signature([secret], BODY, timestamp=T)]), BODY, [secret], now=T + off_s)


def test_a_forged_stale_event_is_refused_for_its_signature() -> None:
    # Only an authentic event learns that it is stale.
    header = signature([new_secret()], BODY, timestamp=T)
    with pytest.raises(ProviderEventSignatureInvalid):
        verify(parse([header]), BODY, [new_secret()], now=T + 10 * TOLERANCE_S)
