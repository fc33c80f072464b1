"""Ports for the servers a test starts: free when chosen, and never the same one twice.

Each port is the kernel's pick for a socket bound to port 0. All the sockets stay open until
every port is chosen, so one call never hands out a port twice: a port closed at once could
come back from the next bind, and a cluster whose two members were given one port never
forms (one of them cannot listen).
"""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free on 127.0.0.1 a moment ago."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
