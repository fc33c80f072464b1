"""The console's form posts are capped before they are parsed: URL-encoded forms only
(415), at most 8 KiB (413), at most 10 fields (400 TOO_MANY_FORM_FIELDS); the login form
included, which anyone can reach."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from app.console.forms import MAX_FORM_BYTES, MAX_FORM_FIELDS
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle

FORM = {"content-type": "application/x-www-form-urlencoded"}
ACTIONS = ["/console/login", "/console/logout", "/console/operations/x/recheck"]


@pytest.mark.parametrize("path", ACTIONS)
def test_a_body_that_is_not_a_urlencoded_form_is_refused(api: Process, path: str) -> None:
    url = f"{api.admin_url}{path}"
    multipart = httpx.post(url, data={"token": "x", "csrf": "x"}, files={"f": b"x"})
    as_json = httpx.post(url, json={"token": "x", "csrf": "x"})

    for answer in (multipart, as_json):
        assert answer.status_code == 415
        assert answer.json()["code"] == "UNSUPPORTED_MEDIA_TYPE"


@pytest.mark.parametrize("path", ACTIONS)
def test_a_form_over_8_kib_is_refused(api: Process, path: str) -> None:
    body = b"token=" + b"a" * MAX_FORM_BYTES

    answer = httpx.post(f"{api.admin_url}{path}", content=body, headers=FORM)

    assert answer.status_code == 413
    assert answer.json()["code"] == "PAYLOAD_TOO_LARGE"


def test_a_form_over_8_kib_is_refused_while_it_streams(api: Process) -> None:
    # Chunked, no declared length: refused once the limit is crossed, before the end.
    def chunks() -> Iterator[bytes]:
        for _ in range(64):
            yield b"token=" + b"a" * 1024

    answer = httpx.post(f"{api.admin_url}/console/login", content=chunks(), headers=FORM)

    assert answer.status_code == 413


def test_a_declared_length_over_the_limit_is_refused_unread(api: Process) -> None:
    assert api.admin_url is not None
    address = urlsplit(api.admin_url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(
            b"POST /console/login HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 100000000\r\n\r\ntoken=a"
        )
        head = sock.recv(4096)

    assert head.startswith(b"HTTP/1.1 413")


@pytest.mark.parametrize("path", ACTIONS)
def test_more_than_10_fields_are_refused(api: Process, path: str) -> None:
    fields = "&".join(f"f{i}=x" for i in range(MAX_FORM_FIELDS + 1))

    answer = httpx.post(f"{api.admin_url}{path}", content=fields, headers=FORM)

    assert answer.status_code == 400
    assert answer.json()["code"] == "TOO_MANY_FORM_FIELDS"


def test_a_form_within_the_limits_still_logs_in(api: Process, admin: AdminHandle) -> None:
    assert api.admin_url is not None
    with httpx.Client(base_url=api.admin_url) as http:
        http.get("/console/login")
        csrf = http.cookies["payments_console_login"]
        padding = "&".join(f"p{i}=" for i in range(MAX_FORM_FIELDS - 2))
        body = f"token={admin.token}&csrf={csrf}&{padding}"
        answer = http.post("/console/login", content=body, headers=FORM)

    assert (answer.status_code, answer.headers["location"]) == (303, "/console")
