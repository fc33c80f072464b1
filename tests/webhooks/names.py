"""Host names whose answers a test chooses, lookup by lookup, for a real worker process.

`NameServer` answers DNS queries (UDP, on port 53 of an address of its own in 127/8) from
a script: each name's A lookups get the script's addresses in turn, the last one repeated
(a rebinding name answers one address, then another); AAAA lookups get no address; any
other name does not exist. It records every query.

`spawn_worker_asking` starts `payments worker` in a mount namespace of its own
(`unshare --mount`, private propagation) where /etc/resolv.conf is bind-mounted over by a
file naming that server: the worker resolves as in production (the event loop's
getaddrinfo, glibc: /etc/hosts first, then DNS), and nothing else on the machine sees the
change, nor is anything left behind when the process exits.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.support.control.processes import PAYMENTS, Process, start_process
from tests.support.control.spawner import Spawner
from tests.support.control.system import with_test_mode

A, AAAA = 1, 28
_NOERROR, _NXDOMAIN = 0, 3


@dataclass
class NameServer:
    """A DNS server on `address`:53 answering A lookups from `script`."""

    address: str
    script: Mapping[str, Sequence[str]]
    queries: list[tuple[str, int]] = field(default_factory=list)
    _served: dict[str, int] = field(default_factory=dict)

    def lookups(self, name: str) -> int:
        """How many A lookups of `name` were answered."""
        return sum(1 for asked, qtype in self.queries if asked == name and qtype == A)

    def answer(self, query: bytes) -> bytes:
        """The response to one query (a header and one question, as glibc sends)."""
        ident, flags = struct.unpack("!HH", query[:4])
        labels, offset = [], 12
        while query[offset]:
            length = query[offset]
            labels.append(query[offset + 1 : offset + 1 + length].decode("ascii").lower())
            offset += 1 + length
        qtype, _qclass = struct.unpack("!HH", query[offset + 1 : offset + 5])
        question = query[12 : offset + 5]
        name = ".".join(labels)
        self.queries.append((name, qtype))
        answers: list[bytes] = []
        rcode = _NOERROR if name in self.script else _NXDOMAIN
        if name in self.script and qtype == A:
            addresses = self.script[name]
            served = self._served.get(name, 0)
            self._served[name] = served + 1
            rdata = socket.inet_aton(addresses[min(served, len(addresses) - 1)])
            # The name by a pointer to the question's, class IN, TTL 0 (never cached).
            answers.append(struct.pack("!HHHIH", 0xC00C, A, 1, 0, 4) + rdata)
        # A response, recursion desired as asked, recursion available.
        reply_flags = 0x8000 | (flags & 0x0100) | 0x0080 | rcode
        header = struct.pack("!HHHHHH", ident, reply_flags, 1, len(answers), 0, 0)
        return header + question + b"".join(answers)


@contextmanager
def name_server(script: Mapping[str, Sequence[str]]) -> Iterator[NameServer]:
    """A `NameServer` serving `script` in a thread, on port 53 of a free 127/8 address."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(20):
        address = f"127.53.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
        try:
            sock.bind((address, 53))
            break
        except OSError:
            continue
    else:
        sock.close()
        raise AssertionError("no free loopback address for a name server")
    server = NameServer(address, script)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                query, peer = sock.recvfrom(512)
            except TimeoutError:
                continue
            sock.sendto(server.answer(query), peer)

    thread = threading.Thread(target=serve, name="name-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()


def spawn_worker_asking(
    spawn: Spawner, server: NameServer, *, once: bool, **settings: str
) -> Process:
    """A `payments worker` whose name lookups go to `server` (its own /etc/resolv.conf)."""
    spawn.log_dir.mkdir(parents=True, exist_ok=True)
    conf = spawn.log_dir / f"resolv-{server.address}.conf"
    conf.write_text(f"nameserver {server.address}\noptions timeout:2 attempts:1\n")
    mount = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
    worker = [*PAYMENTS, "worker", *(["--once"] if once else [])]
    args = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount]
    process = start_process(
        "worker",
        [*args, str(conf), *worker],
        env=with_test_mode(spawn.env(**settings)),
        log_dir=spawn.log_dir,
    )
    spawn.started.append(process)
    return process
