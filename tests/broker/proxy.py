"""A TCP proxy a test can cut: between a consumer and the broker, so the broker can seem to
go away (every connection through it closed, new ones turned away) and come back, while the
real one keeps serving every other test."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

_CHUNK = 65536


class Proxy:
    """Forwards 127.0.0.1:`port` to `upstream`, one thread per direction of a connection."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._refusing = False
        self._closed = threading.Event()
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def cut(self, *, refuse: bool) -> None:
        """Close every connection through the proxy; with `refuse`, turn new ones away
        (accepted and closed at once) until `restore`."""
        with self._lock:
            self._refusing = refuse
            sockets, self._open = self._open, []
        for sock in sockets:
            _close(sock)

    def restore(self) -> None:
        """Let new connections through again."""
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        self._closed.set()
        self._accepting.join(timeout=5)
        self._listener.close()
        self.cut(refuse=True)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                _close(client)
                continue
            try:
                server = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._open += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(_CHUNK):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(source)
        _close(target)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
