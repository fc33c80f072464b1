"""The `Provider-Signature` check at its edges, with the limits written out as docs/api.md
states them (not read from the module, so a limit that moved is seen): members of any other
name left alone wherever they sort, at most eight `v1`, 300 s either way.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from app.provider_events.errors import ProviderEventSignatureInvalid, ProviderEventStale
from app.provider_events.signature import parse, verify
from tests.support.factories.provider_events import new_secret, signature

BODY = b'{"id": "evt_edges"}'
T = 1_800_000_000
ONE, OTHER = "01" * 32, "ef" * 32


@pytest.mark.parametrize(
    "member",
    [
        # Names sorting before "t", between "t" and "v1", and after "v1", each with a value
        # that would pass for a timestamp or a digest if it were read as one.
        pytest.param("a=1", id="before-t"),
        pytest.param("s=1700000000", id="just-before-t"),
        pytest.param("=1", id="no-name"),
        pytest.param(f"v0={OTHER}", id="v0"),
        pytest.param(f"v2={OTHER}", id="v2"),
        pytest.param(f"w={OTHER}", id="after-v1"),
        pytest.param("v2=not-a-digest", id="v2-malformed"),
    ],
)
def test_a_member_of_another_name_is_left_alone(member: str) -> None:
    for header in (f"{member},t={T},v1={ONE}", f"t={T},v1={ONE},{member}"):
        signed = parse([header])

        assert (signed.timestamp, signed.digests) == (T, (bytes.fromhex(ONE),))


def test_eight_signatures_are_taken_and_a_ninth_refused() -> None:
    secrets = [new_secret() for _ in range(9)]
    eight = parse([signature(secrets[:8], BODY, timestamp=T)])
    assert len(eight.digests) == 8
    verify(eight, BODY, [secrets[7]], now=T)

    with pytest.raises(ProviderEventSignatureInvalid, match="Provider-Signature must be"):
        parse([signature(secrets, BODY, timestamp=T)])


@pytest.mark.parametrize("off_s", [-300, 300])
def test_a_signature_300_s_off_is_taken(off_s: int) -> None:
    secret = new_secret()
    verify(parse([signature([secret], BODY, timestamp=T)]), BODY, [secret], now=T + off_s)


@pytest.mark.parametrize("off_s", [-301, 301])
def test_a_signature_301_s_off_is_stale(off_s: int) -> None:
    secret = new_secret()
    with pytest.raises(ProviderEventStale, match="more than 300 s"):
        verify(parse([signature([secret], BODY, timestamp=T)]), BODY, [secret], now=T + off_s)


def test_a_parsed_header_cannot_be_changed() -> None:
    signed = parse([f"t={T},v1={ONE}"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        signed.timestamp = T + 1  # type: ignore[misc]


def test_now_is_passed_by_name() -> None:
    # The clock is named at every call, never taken by its place after the secrets.
    now = inspect.signature(verify).parameters["now"]
    assert now.kind is inspect.Parameter.KEYWORD_ONLY
