"""The suite's own harness: what it changes in the test processes to keep the suite fast
must not change what a test gets."""

from __future__ import annotations

import ssl

import httpx

from tests.support.control.tls_context import default_context_is_shared


def _context(client: httpx.Client) -> ssl.SSLContext:
    context: ssl.SSLContext = client._transport._pool._ssl_context  # type: ignore[attr-defined]
    return context


def test_clients_asking_for_the_default_tls_context_share_one() -> None:
    assert default_context_is_shared()
    with httpx.Client() as first, httpx.Client(base_url="http://127.0.0.1:1") as second:
        assert _context(first) is _context(second)
        assert _context(first).verify_mode == ssl.CERT_REQUIRED
        assert _context(first).check_hostname


def test_a_client_with_a_context_of_its_own_keeps_it() -> None:
    own = ssl.create_default_context()
    with httpx.Client() as default, httpx.Client(verify=own) as mine:
        assert _context(mine) is own
        assert _context(mine) is not _context(default)
    with httpx.Client(verify=False) as unverified:
        assert _context(unverified).verify_mode == ssl.CERT_NONE
        assert _context(unverified) is not _context(default)
