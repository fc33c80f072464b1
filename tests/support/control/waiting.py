"""Waiting on a condition, never on a fixed sleep: any predicate, or a process holding a
connection to a port."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from tests.support.control.processes import Process


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition",
) -> None:
    """Poll `predicate` until it is true; fail the test with `message` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def connected_to(process: Process, url: str) -> bool:
    """Whether `process` holds an established TCP connection to the port of `url`.

    A worker has no HTTP endpoint to probe; once it holds a connection to PostgreSQL its
    engine is up and its first reconcile pass has run.
    """
    port = urlsplit(url).port
    inodes = _socket_inodes(process.pid)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            established = fields[3] == "01"
            if established and remote_port == port and fields[9] in inodes:
                return True
    return False


def wait_connected(process: Process, url: str, *, timeout: float = 30.0) -> None:
    """Wait until `process` is connected to `url` (see `connected_to`)."""

    def connected() -> bool:
        assert process.alive(), f"{process.name} exited early:\n{process.log()}"
        return connected_to(process, url)

    wait_until(connected, timeout=timeout, message=f"{process.name} connected to {url}")
