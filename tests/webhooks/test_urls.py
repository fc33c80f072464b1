"""Which URLs may receive webhooks (no SSRF), at creation and at delivery."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from app.webhooks.urls import UrlRefused, check_url, parse, refuse_address, resolve

REFUSED_ALWAYS = [
    "ftp://example.com/hook",
    "http://example.com/hook",  # plain http off this machine
    "https://10.0.0.5/hook",  # private
    "https://172.16.3.4/hook",
    "https://192.168.1.1/hook",
    "https://169.254.169.254/latest/meta-data",  # cloud metadata (link-local)
    "https://[fe80::1]/hook",  # link-local v6
    "https://[fd00:ec2::254]/hook",  # a metadata service on a unique local address
    "https://100.100.100.200/hook",  # carrier-grade NAT range (another metadata service)
    "https://0.0.0.0/hook",
    "https://[::ffff:10.0.0.1]/hook",  # private, mapped into v6
    "https://224.0.0.1/hook",  # multicast
    "https://user:pass@example.com/hook",
    "https:///hook",
    "https://example.com/hook#part",
    "https://exa mple.com/hook",
    "https://example.com:99999/hook",
]


@pytest.mark.parametrize("url", REFUSED_ALWAYS)
def test_refused_even_in_development(url: str) -> None:
    with pytest.raises(UrlRefused):
        asyncio.run(check_url(url, allow_local=True))


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000/hook", "http://localhost:9/x", "https://[::1]/hook"],
)
def test_loopback_only_when_local_is_allowed(url: str) -> None:
    assert asyncio.run(check_url(url, allow_local=True)) == url
    with pytest.raises(UrlRefused):
        asyncio.run(check_url(url, allow_local=False))


def test_public_https_is_accepted() -> None:
    target = parse("https://93.184.215.14:8443/hooks?x=1", allow_local=False)
    assert (target.scheme, target.host, target.port, target.path) == (
        "https",
        "93.184.215.14",
        8443,
        "/hooks?x=1",
    )
    assert asyncio.run(resolve(target, allow_local=False)) == [
        ipaddress.ip_address("93.184.215.14")
    ]


def test_a_name_that_resolves_to_a_forbidden_address_is_refused_at_delivery() -> None:
    # `localhost` is a name (not a literal) that resolves to loopback.
    target = parse("https://localhost/hook", allow_local=True)
    assert asyncio.run(resolve(target, allow_local=True))
    with pytest.raises(UrlRefused):
        asyncio.run(resolve(target, allow_local=False))


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "fc00::1", "100.64.0.1"]
)
def test_non_public_addresses_are_refused(address: str) -> None:
    with pytest.raises(UrlRefused):
        refuse_address(ipaddress.ip_address(address), allow_local=False)
