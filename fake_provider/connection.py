"""Closing a connection without sending any response, which ASGI itself cannot express.

`DroppableHttpToolsProtocol` is uvicorn's httptools protocol (the C HTTP parser) with one
addition: each request's scope carries a `drop` coroutine that closes this connection's
transport. An endpoint awaits
`drop_connection(request)` and the client sees the connection end before a single byte of a
status line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

DROP_EXTENSION = "fake_provider.drop"


class ConnectionDropUnsupportedError(RuntimeError):
    """The app is not served by `DroppableHttpToolsProtocol`, so it cannot drop connections."""


class DroppableHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, extended so the app can close a connection unanswered."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._closed = asyncio.Event()
        inner = self.app

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            scope.setdefault("extensions", {})[DROP_EXTENSION] = {"drop": self._drop}
            await inner(scope, receive, send)

        self.app = app

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._closed.set()

    async def _drop(self) -> None:
        self.transport.close()
        # connection_lost runs on a later loop iteration; until then uvicorn still thinks the
        # client is there and would write a response to the socket. Once it has run, the
        # request cycle is marked disconnected and whatever the app sends is discarded.
        await self._closed.wait()


async def drop_connection(request: Request) -> None:
    """Close the client's connection without a response; return once it is closed.

    The endpoint must still return a response afterwards (ASGI requires one); the server
    discards it.
    """
    extension = request.scope.get("extensions", {}).get(DROP_EXTENSION)
    if extension is None:
        raise ConnectionDropUnsupportedError("serve the app with fake_provider.server.serve")
    drop: Callable[[], Awaitable[None]] = extension["drop"]
    await drop()
