"""Two listeners, one app: the tenants' port, and the operators' own.

One uvicorn server binds two sockets (`app/server.py`): the public one tenants call, and
the operators' one (`PAYMENTS_ADMIN_HOST`:`PAYMENTS_ADMIN_PORT`, 127.0.0.1:8001 by default)
that serves the admin API, the web console and `/metrics`. `by_listener` tells them apart
by the port the connection arrived on (the ASGI scope's `server`), which a client cannot
choose by any header:

- on the public port, `/admin`, `/console` and `/metrics` answer `404`, as paths that do
  not exist; everything else goes on to the fast path for `POST /payments` and the app
  behind it (what `POST /payments` pays for the split is one read of the scope and one
  comparison of the port, before the fast path sees it);
- on the operators' port only those paths and the health checks are served (anything else
  is `404`; `app.main` puts the console's form caps, `app/console/forms.py`, in front of
  the app there), and, outside development, every answer says `Strict-Transport-Security`.

The lifespan (no `server` in its scope) goes to the public side, which hands it to the app.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import NotFound

# Everything operators reach, and nothing else, is under these.
OPERATOR_PREFIXES = ("/admin", "/console", "/metrics")
# What both listeners answer: load balancers and orchestrators probe either.
SHARED_PATHS = frozenset({"/healthz", "/readyz"})
HSTS = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")


def operators_path(path: str) -> bool:
    """Whether `path` belongs to the operators (however many slashes it starts with)."""
    path = "/" + path.lstrip("/")
    return any(path == prefix or path.startswith(prefix + "/") for prefix in OPERATOR_PREFIXES)


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    await NotFound("no such resource").response()(scope, receive, send)


def public_only(app: ASGIApp) -> ASGIApp:
    """`app` with the operators' paths answered `404`."""

    async def public(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and operators_path(scope["path"]):
            await _not_found(scope, receive, send)
        else:
            await app(scope, receive, send)

    return public


def operators_only(app: ASGIApp, *, development: bool) -> ASGIApp:
    """`app` with only the operators' paths and the health checks served."""

    async def operators(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope["path"]
        target = app if operators_path(path) or path in SHARED_PATHS else _not_found
        if development:
            await target(scope, receive, send)
            return

        async def send_hsts(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), HSTS]
            await send(message)

        await target(scope, receive, send_hsts)

    return operators


def by_listener(public: ASGIApp, operators: ASGIApp, *, admin_port: int) -> ASGIApp:
    """`operators` for connections that arrived on `admin_port`, `public` for the rest."""

    async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if server is not None and server[1] == admin_port:
            await operators(scope, receive, send)
        else:
            await public(scope, receive, send)

    return dispatch
