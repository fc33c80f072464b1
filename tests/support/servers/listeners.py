"""A TCP listener that never accepts: new connections to it hang in the handshake.

`listen(0)` leaves room for one queued connection; once a filler connection takes it and a
second filler is waiting, the kernel drops every further SYN, so a client's connect neither
succeeds nor fails until its own timeout. That is what a provider whose accept queue is full
(or a firewall silently dropping packets) looks like from our side.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager


@contextmanager
def unaccepting_listener() -> Iterator[str]:
    """Yield `http://127.0.0.1:PORT` of a listener whose accept queue is full."""
    with ExitStack() as stack:
        server = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        address = server.getsockname()
        # The first filler completes its handshake into the (one-slot) accept queue...
        first = stack.enter_context(socket.create_connection(address, timeout=5))
        assert first.fileno() >= 0
        # ...and the next ones find it full: their SYNs are dropped, as will be the client's.
        for _ in range(2):
            filler = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            filler.setblocking(False)
            filler.connect_ex(address)
        yield f"http://{address[0]}:{address[1]}"
