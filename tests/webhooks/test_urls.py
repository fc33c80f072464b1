"""Which URLs may receive webhooks (no SSRF), at creation and at delivery."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from app.webhooks.urls import (
    NON_PUBLIC,
    UrlRefused,
    check_url,
    normalise_host,
    parse,
    refuse_address,
    resolve,
)

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
    # Fullwidth digits that UTS 46 maps to an address that is not public.
    "https://\uff11\uff10.\uff10.\uff10.\uff11/hook",
    "https://\uff11\uff16\uff19.\uff12\uff15\uff14.\uff11\uff16\uff19.\uff12\uff15\uff14/",
    # IPv6 forms that stand for, or tunnel to, an IPv4 address.
    "https://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 of 169.254.169.254
    "https://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1: never loopback here
    "https://[64:ff9b:1::5db8:d70e]/hook",  # local-use NAT64
    "https://[2002:a00:1::1]/hook",  # 6to4 (of 10.0.0.1)
    "https://[2002:5db8:d70e::1]/hook",  # 6to4 of a public address: still refused
    "https://[2001:0:5db8:d70e::1]/hook",  # Teredo
    "https://[::a00:1]/hook",  # IPv4-compatible
    "https://[::5db8:d70e]/hook",
    # Host names IDNA does not allow.
    "https://a..b/hook",
    "https://" + "x" * 64 + ".example.com/hook",
    "https://xn--zz.example.com/hook",
    "https://-bad.example.com/hook",
    "https://exa%6dple.com/hook",
    "https://\u2764\ufe0f.example.com/hook",
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


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("https://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/hook", "https://example.com/hook"),
        ("https://EXAMPLE.com./hook?a=1", "https://example.com/hook?a=1"),
        ("https://b\u00fccher.example:8443/h", "https://xn--bcher-kva.example:8443/h"),
        ("https://example\u3002com/hook", "https://example.com/hook"),
        ("https://xn--bcher-kva.example/h", "https://xn--bcher-kva.example/h"),
        ("https://my_hooks.example.com/h", "https://my_hooks.example.com/h"),
        ("https://[2606:4700::1111]/h", "https://[2606:4700::1111]/h"),
    ],
)
def test_hosts_are_normalised_to_a_labels(url: str, normalised: str) -> None:
    target = parse(url, allow_local=False)
    assert target.url == normalised
    assert target.host.isascii()


def test_fullwidth_loopback_is_judged_as_loopback() -> None:
    url = "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:9/hook"
    assert asyncio.run(check_url(url, allow_local=True)) == "http://localhost:9/hook"
    with pytest.raises(UrlRefused):
        asyncio.run(check_url(url, allow_local=False))
    digits = "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:9/hook"
    assert asyncio.run(check_url(digits, allow_local=True)) == "http://127.0.0.1:9/hook"


@pytest.mark.parametrize(
    "host", ["a..b", "x" * 64, "a." + "b" * 63 + "." + "c" * 63 + "." + "d" * 63 + "." + "e" * 63]
)
def test_invalid_host_names_are_refused(host: str) -> None:
    with pytest.raises(UrlRefused):
        normalise_host(host)


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::a00:1",
        "64:ff9b::6440:1",  # NAT64 of carrier-grade NAT
        "64:ff9b:1::1",
        "2002::1",
        "2001::1",
        "2001:0:ffff::1",
        "::a00:1",
        "::808:808",
        "::ffff:0:808:808",
    ],
)
def test_ipv6_forms_of_ipv4_are_refused(address: str) -> None:
    with pytest.raises(UrlRefused):
        refuse_address(ipaddress.ip_address(address), allow_local=False)


def test_nat64_of_a_public_address_is_judged_by_it() -> None:
    refuse_address(ipaddress.ip_address("64:ff9b::5db8:d70e"), allow_local=False)


@pytest.mark.parametrize(
    "url",
    ["https://10.0.0.5/hook", "https://[fd00:ec2::254]/", "https://[64:ff9b::a00:5]/"],
)
def test_the_refusal_does_not_name_the_address(url: str) -> None:
    with pytest.raises(UrlRefused) as refused:
        asyncio.run(check_url(url, allow_local=False))
    assert str(refused.value) == NON_PUBLIC
