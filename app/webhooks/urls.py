"""Which webhook URLs are allowed, and which addresses a delivery may connect to (no SSRF).

A URL must be `https`; `http` only to a loopback address, and loopback at all only when
PAYMENTS_WEBHOOKS_ALLOW_LOCAL=1 (dev and tests). Every address the host names must be a
public (globally routable) one: private, loopback, link-local (cloud metadata services
such as 169.254.169.254 live there), carrier-grade NAT, multicast, reserved and unspecified
addresses are refused. IPv6 forms that carry or reach an IPv4 address are judged by it
(IPv4-mapped, NAT64's 64:ff9b::/96) or refused outright where the far end cannot be known
(6to4 2002::/16, Teredo 2001::/32, IPv4-compatible ::a.b.c.d, local-use NAT64
64:ff9b:1::/48). The check runs when an endpoint is created and again before every
delivery, on the addresses the name resolves to then; the delivery connects to the address
it vetted, so a name that re-resolves in between (DNS rebinding) gains nothing.

Hosts are normalised to IDNA A-labels (UTS 46 mapping: fullwidth `example.com` is
`example.com`, `bücher.de` is `xn--bcher-kva.de`) before anything else looks at them, so
an address spelt in fullwidth digits is judged as the address it is, and the sender only
ever meets an ASCII host. The endpoint is stored with the normalised URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

import idna

MAX_URL_LENGTH = 2048
RESOLVE_TIMEOUT_S = 3.0
MAX_HOST_LENGTH = 253
MAX_LABEL_LENGTH = 63
# The one message for any address that may not be reached: it never names the address (an
# endpoint's creator learns nothing of what a name resolves to inside the network).
NON_PUBLIC = "resolves to a non-public address"

# An ASCII label as DNS names have them (underscores too, as some services use them).
_ASCII_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# IPv6 ranges whose far end is an IPv4 address (or a network) that cannot be vetted here.
_REFUSED_V6 = (
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # local-use NAT64
    ipaddress.IPv6Network("2002::/16"),  # 6to4
    ipaddress.IPv6Network("2001::/32"),  # Teredo
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT)
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UrlRefused(ValueError):
    """The URL, or an address it names, may not receive webhooks; the message says why."""


class Unresolved(LookupError):
    """The host names no address now (or the lookup failed or timed out)."""


@dataclass(frozen=True)
class Target:
    """A URL taken apart for a delivery: where to connect, and what to call the host."""

    scheme: str
    host: str
    port: int
    path: str
    # The URL with its host normalised (what an endpoint stores and shows).
    url: str = ""


def _unprintable(code: int) -> bool:
    """A control character (C0 below the space, DEL, C1 0x80-0x9F) or a lone surrogate (from
    a JSON `\ud800` escape: no text that can be stored)."""
    return code < 0x21 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF


def parse(url: str, *, allow_local: bool) -> Target:
    """The URL's parts; `UrlRefused` for anything but an absolute https (or local http) URL."""
    if len(url) > MAX_URL_LENGTH:
        raise UrlRefused(f"longer than {MAX_URL_LENGTH} characters")
    try:
        parts: SplitResult = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("https", "http"):
        raise UrlRefused("must be an https:// URL")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("must not carry credentials")
    if not parts.hostname:
        raise UrlRefused("has no host")
    if parts.fragment:
        raise UrlRefused("must not have a fragment")
    if any(_unprintable(ord(ch)) or ch.isspace() for ch in url):
        raise UrlRefused("must not contain spaces or control characters")
    host = normalise_host(parts.hostname)
    literal = _literal(host)
    local_name = host == "localhost" or host.endswith(".localhost")
    if parts.scheme == "http" and not (
        allow_local and (local_name or (literal is not None and literal.is_loopback))
    ):
        raise UrlRefused("must be an https:// URL (http only to loopback, in development)")
    if local_name and not allow_local:
        raise UrlRefused("must not point at this machine")
    if literal is not None:
        refuse_address(literal, allow_local=allow_local)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    shown = f"[{host}]" if ":" in host else host
    netloc = shown if port is None else f"{shown}:{port}"
    normalised = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    default_port = 443 if parts.scheme == "https" else 80
    return Target(parts.scheme, host, default_port if port is None else port, path, normalised)


def normalise_host(host: str) -> str:
    """`host` as ASCII: an IP literal as it is, a name as IDNA A-labels after UTS 46 mapping
    (case folded, fullwidth forms and ideographic full stops mapped, one trailing dot
    dropped); `UrlRefused` for a name that is not valid (an empty label, one over 63
    characters, a character IDNA disallows, a broken `xn--` label)."""
    if ":" in host:
        if _literal(host) is None:
            raise UrlRefused("has an invalid host")
        return host
    try:
        mapped = idna.uts46_remap(host, std3_rules=False, transitional=False)
    except UnicodeError:
        raise UrlRefused("has an invalid host name") from None
    mapped = mapped.removesuffix(".")
    labels: list[str] = []
    for label in mapped.split("."):
        if not label:
            raise UrlRefused("has an invalid host name (an empty label)")
        try:
            if label.isascii() and not label.startswith("xn--"):
                ascii_label = label
                if not _ASCII_LABEL.fullmatch(label):
                    raise UrlRefused("has an invalid host name")
            else:
                ascii_label = idna.alabel(label).decode("ascii")
        except UnicodeError:
            raise UrlRefused("has an invalid host name") from None
        if len(ascii_label) > MAX_LABEL_LENGTH:
            raise UrlRefused(f"has a host name label over {MAX_LABEL_LENGTH} characters")
        labels.append(ascii_label)
    normalised = ".".join(labels)
    if len(normalised) > MAX_HOST_LENGTH:
        raise UrlRefused(f"has a host name over {MAX_HOST_LENGTH} characters")
    return normalised


def refuse_address(address: IPAddress, *, allow_local: bool) -> None:
    """`UrlRefused` unless `address` is public (or loopback, when local ones are allowed).

    An IPv6 address that stands for an IPv4 one (mapped, NAT64) is judged by that; one
    that tunnels to an IPv4 address or network (6to4, Teredo, IPv4-compatible, local-use
    NAT64) is refused.
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address in _NAT64:
            address = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
            # The gateway's own loopback, not this machine's: never a local receiver.
            allow_local = False
        elif any(address in network for network in _REFUSED_V6):
            raise UrlRefused(NON_PUBLIC)
        elif int(address) >> 32 == 0 and int(address) > 1:
            # IPv4-compatible (::a.b.c.d, deprecated); `::` and `::1` are judged below.
            raise UrlRefused(NON_PUBLIC)
    if address.is_loopback and allow_local:
        return
    if not address.is_global or address.is_multicast:
        raise UrlRefused(NON_PUBLIC)


async def resolve(target: Target, *, allow_local: bool) -> list[IPAddress]:
    """The addresses the host names now, all vetted; `UrlRefused` if any is not allowed,
    `Unresolved` if there are none.

    One refused address refuses the host: a name that answers both a public and a private
    address is how a rebinding attack looks.
    """
    literal = _literal(target.host)
    if literal is not None:
        refuse_address(literal, allow_local=allow_local)
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            infos = await loop.getaddrinfo(
                target.host, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
    except (OSError, TimeoutError, UnicodeError) as exc:
        raise Unresolved(f"cannot resolve {target.host}: {exc}") from None
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        refuse_address(address, allow_local=allow_local)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise Unresolved(f"{target.host} has no address")
    return addresses


async def check_url(url: str, *, allow_local: bool) -> str:
    """Check a URL for a new endpoint: the URL to store (its host normalised), or
    `UrlRefused` if it or what it resolves to now is not allowed. A name that does not
    resolve yet is accepted (it is checked at delivery)."""
    target = parse(url, allow_local=allow_local)
    with contextlib.suppress(Unresolved):
        await resolve(target, allow_local=allow_local)
    return target.url


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
