"""Webhook URL vetting at its edges: each limit at and one past it, and the default ports.

`test_urls.py` shows which URLs are refused; these pin where each limit lies (a URL of 2,048
characters, a label of 63, a host of 253), the exact ranges of characters refused (controls
below the space, DEL and the C1 controls 0x80-0x9F, the surrogates, and nothing around
them), the port a URL without one connects to, and the
address a resolved name with an IPv6 zone is judged by.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import socket
from typing import Any, ClassVar

import pytest

from app.webhooks.urls import (
    MAX_HOST_LENGTH,
    MAX_LABEL_LENGTH,
    MAX_URL_LENGTH,
    NON_PUBLIC,
    RESOLVE_TIMEOUT_S,
    Unresolved,
    UrlRefused,
    normalise_host,
    parse,
    refuse_address,
    resolve,
)


def test_the_limits_are_those_of_dns_and_of_a_url() -> None:
    assert (MAX_URL_LENGTH, MAX_HOST_LENGTH, MAX_LABEL_LENGTH) == (2048, 253, 63)
    # A delivery waits this long for a name's addresses, then counts as unresolved.
    assert RESOLVE_TIMEOUT_S == 3.0


def test_a_url_of_the_longest_length_is_accepted_and_one_more_character_is_not() -> None:
    base = "https://example.com/"
    longest = base + "a" * (MAX_URL_LENGTH - len(base))
    assert parse(longest, allow_local=False).url == longest
    with pytest.raises(UrlRefused, match="longer than 2048 characters"):
        parse(longest + "a", allow_local=False)


def test_a_label_of_63_and_a_host_of_253_characters_are_accepted() -> None:
    label = "a" * 63
    assert normalise_host(f"{label}.example") == f"{label}.example"
    with pytest.raises(UrlRefused, match="label over 63"):
        normalise_host(f"{label}a.example")
    # 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253
    host = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    assert len(host) == 253
    assert normalise_host(host) == host
    with pytest.raises(UrlRefused, match="host name over 253"):
        normalise_host(host + "d")


@pytest.mark.parametrize(
    "char",
    [chr(0xD800), chr(0xDABC), chr(0xDFFF), "\x00", " ", "\t", "\x7f", "\x80", "\x85", "\x9f"],
)
def test_surrogates_and_control_characters_are_refused(char: str) -> None:
    with pytest.raises(UrlRefused, match="spaces or control characters"):
        parse(f"https://example.com/a{char}b", allow_local=False)


@pytest.mark.parametrize("char", ["\x7f", "\x80", "\x9f"])
def test_del_and_the_c1_controls_are_refused_in_the_host_too(char: str) -> None:
    with pytest.raises(UrlRefused, match="spaces or control characters"):
        parse(f"https://exa{char}mple.com/", allow_local=False)


# 0xA0 (no-break space) is refused as a space; 0xA1 is the first printable after C1.
@pytest.mark.parametrize("char", ["\x21", "\x7e", "\xa1", "\ud7ff", "\ue000", "\uffff"])
def test_the_characters_either_side_of_the_refused_ranges_are_accepted(char: str) -> None:
    assert parse(f"https://example.com/a{char}b", allow_local=False).path == f"/a{char}b"


def test_a_url_without_a_port_connects_to_its_schemes_default() -> None:
    assert parse("https://example.com/h", allow_local=False).port == 443
    assert parse("http://127.0.0.1/h", allow_local=True).port == 80
    assert parse("https://example.com:8443/h", allow_local=False).port == 8443


@pytest.mark.parametrize("url", ["https://user@example.com/h", "https://:secret@example.com/h"])
def test_a_user_name_or_a_password_alone_is_refused(url: str) -> None:
    with pytest.raises(UrlRefused, match="credentials"):
        parse(url, allow_local=False)


def test_a_parsed_url_cannot_be_changed() -> None:
    target = parse("https://example.com/h", allow_local=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.host = "10.0.0.1"  # type: ignore[misc]


@pytest.mark.parametrize("host", ["a\u0378b.example", "a\ufffd.example", "xn--zz.example"])
def test_a_name_idna_cannot_map_is_refused_as_invalid(host: str) -> None:
    with pytest.raises(UrlRefused, match="invalid host name"):
        normalise_host(host)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("::2", False),  # IPv4-compatible ::0.0.0.2, the first past :: and ::1
        ("::8000:1", False),  # ::128.0.0.1: the top half of the IPv4 space too
        ("::ffff:ffff", False),  # the last IPv4-compatible address
        ("::1:0:1", True),  # past ::/96: judged as the address it is
    ],
)
def test_the_ipv4_compatible_range_is_exactly_the_v4_space(address: str, public: bool) -> None:
    ip = ipaddress.ip_address(address)
    if public:
        refuse_address(ip, allow_local=False)
    else:
        with pytest.raises(UrlRefused, match=NON_PUBLIC):
            refuse_address(ip, allow_local=False)


def test_plain_http_is_refused_off_loopback_even_in_development() -> None:
    with pytest.raises(UrlRefused, match="http only to loopback"):
        parse("http://93.184.215.14/h", allow_local=True)
    assert parse("https://93.184.215.14/h", allow_local=False).scheme == "https"


class _Resolver(asyncio.SelectorEventLoop):
    """An event loop whose resolver answers every name with `answer`: a list of addresses
    (IPv6 ones with a zone, as getaddrinfo gives a link-local address: `fe80::1%eth0`), or
    an exception to raise. It stands in for DNS, which the tests cannot steer."""

    answer: ClassVar[list[str] | BaseException] = []

    async def getaddrinfo(self, host: Any, port: Any, **kwargs: Any) -> Any:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, port, 0, 2)) for a in self.answer]


def _resolve(
    answer: list[str] | BaseException,
) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    target = parse("https://hooks.example.com/h", allow_local=False)
    loop = type("Answering", (_Resolver,), {"answer": answer})
    with asyncio.Runner(loop_factory=loop) as runner:
        return runner.run(resolve(target, allow_local=False))


def test_a_resolved_address_is_judged_without_its_zone() -> None:
    with pytest.raises(UrlRefused) as refused:
        _resolve(["fe80::1%2"])
    assert str(refused.value) == NON_PUBLIC
    public = ipaddress.ip_address("2606:4700::1111")
    assert _resolve(["2606:4700::1111%2", "2606:4700::1111"]) == [public]


@pytest.mark.parametrize(
    "error",
    [socket.gaierror(-2, "Name or service not known"), TimeoutError(), UnicodeError("label")],
)
def test_a_lookup_that_fails_leaves_the_name_unresolved(error: BaseException) -> None:
    with pytest.raises(Unresolved, match=r"cannot resolve hooks\.example\.com"):
        _resolve(error)
    with pytest.raises(Unresolved, match="has no address"):
        _resolve([])
