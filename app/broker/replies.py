"""A command's answer as a reply message: the HTTP answer's body, its status in a header.

The reply goes to the command's `reply_to` queue through the default exchange, with the
command's `correlation_id`. Its body is byte for byte what the HTTP API answers the same
request (a replay's is the stored body, as over HTTP), its `content_type` the HTTP media
type (`application/json` or `application/problem+json`); its headers are the HTTP status
(`status`, an integer), the command's type (`command`) and the HTTP answer's own headers,
lower-cased (`location`, `retry-after`, `link`, `idempotent-replayed`). Replies are not
persistent: the outcome is stored with the operation, and `GET /operations?idempotency_key=`
finds it again. A reply has no `type` of its own: sent to a command queue by mistake, it is
refused there as no command (and, without a `reply_to`, answered to no one).
"""

from __future__ import annotations

import aio_pika
from aio_pika.abc import HeadersType

from app.errors import PROBLEM_JSON, ProblemError, dump_json
from app.idempotency.replies import Reply

STATUS_HEADER = "status"
# The command's type. Not the reply's own `type`: a reply is no command, wherever it goes.
COMMAND_HEADER = "command"


def problem_reply(problem: ProblemError) -> Reply:
    """The reply HTTP gives to `problem`: its status, its problem+json body, its headers."""
    return Reply(
        status=problem.status,
        body=dump_json(problem.body()),
        media_type=PROBLEM_JSON,
        headers=problem.headers,
    )


def reply_message(
    reply: Reply, *, correlation_id: str | None, command: str | None
) -> aio_pika.Message:
    """The message carrying `reply` to `command` back to the command's sender."""
    headers: HeadersType = {name.lower(): value for name, value in reply.headers.items()}
    headers[STATUS_HEADER] = reply.status
    if command is not None:
        headers[COMMAND_HEADER] = command
    return aio_pika.Message(
        body=reply.body,
        content_type=reply.media_type,
        correlation_id=correlation_id,
        headers=headers,
        delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
    )
