"""Which webhook URLs are allowed, and which addresses a delivery may connect to (no SSRF).

A URL must be `https`; `http` only to a loopback address, and loopback at all only when
PAYMENTS_WEBHOOKS_ALLOW_LOCAL=1 (dev and tests). Every address the host names must be a
public (globally routable) one: private, loopback, link-local (cloud metadata services
such as 169.254.169.254 live there), carrier-grade NAT, multicast, reserved and unspecified
addresses are refused. The check runs when an endpoint is created and again before every
delivery, on the addresses the name resolves to then; the delivery connects to the address
it vetted, so a name that re-resolves in between (DNS rebinding) gains nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

MAX_URL_LENGTH = 2048
RESOLVE_TIMEOUT_S = 3.0

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class UrlRefused(ValueError):
    """The URL, or an address it names, may not receive webhooks; the message says why."""


@dataclass(frozen=True)
class Target:
    """A URL taken apart for a delivery: where to connect, and what to call the host."""

    scheme: str
    host: str
    port: int
    path: str


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
    if any(ch.isspace() or ord(ch) < 0x21 for ch in url):
        raise UrlRefused("must not contain spaces or control characters")
    host = parts.hostname
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
    return Target(parts.scheme, host, port or (443 if parts.scheme == "https" else 80), path)


def refuse_address(address: IPAddress, *, allow_local: bool) -> None:
    """`UrlRefused` unless `address` is public (or loopback, when local ones are allowed)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback and allow_local:
        return
    if not address.is_global or address.is_multicast:
        raise UrlRefused(f"points at a non-public address ({address})")


async def resolve(target: Target, *, allow_local: bool) -> list[IPAddress]:
    """The addresses the host names now, all vetted; `UrlRefused` if any is not allowed.

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
    except (OSError, TimeoutError) as exc:
        raise LookupError(f"cannot resolve {target.host}: {exc}") from None
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        refuse_address(address, allow_local=allow_local)
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise LookupError(f"{target.host} has no address")
    return addresses


async def check_url(url: str, *, allow_local: bool) -> str:
    """Check a URL for a new endpoint: `UrlRefused` if it or what it resolves to now is not
    allowed. A name that does not resolve yet is accepted (it is checked at delivery)."""
    target = parse(url, allow_local=allow_local)
    with contextlib.suppress(LookupError):
        await resolve(target, allow_local=allow_local)
    return url


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
