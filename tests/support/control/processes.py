"""Real processes for tests: start one, wait until it answers, stop or kill it.

Readiness is awaited as a condition (the process answers HTTP), never as a fixed sleep.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.control.forkserver import SERVER, ForkedChild
from tests.support.control.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[3]


PAYMENTS = [sys.executable, "-m", "app.cli"]


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports that were free a moment ago on 127.0.0.1.

    Every socket stays bound until all the ports are chosen: a port given back at once can
    come back from the next bind, and a cluster whose two members got one port never forms.
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


@dataclass
class Process:
    """A started child process with its log file."""

    name: str
    # Started by `subprocess.Popen`, or forked by the fork server (`forkserver.py`).
    popen: subprocess.Popen[bytes] | ForkedChild
    log_path: Path
    url: str | None = None
    extra: dict[str, object] = field(default_factory=dict)
    # An API's operators' listener (admin API, console, /metrics), beside `url`.
    admin_url: str | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up."""
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit within `timeout`."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=30)
        return self.popen.returncode

    def wait_exit(self, timeout: float = 30.0) -> int:
        """The exit code; a process still running after `timeout` is killed, and the test fails."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.name} did not exit within {timeout}s:\n{self.log()[-5000:]}"
            ) from None


def start_process(
    name: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    log_dir: Path,
    ready_url: str | None = None,
    url: str | None = None,
    timeout: float = 30.0,
    cwd: Path | None = None,
    fork: bool = False,
) -> Process:
    """Start `args` with `env` added to this environment; wait for `ready_url` to answer 2xx.

    It runs in the repository (or in `cwd`: `python -m` then imports that tree's code). With
    `fork`, a `python -m` command in the repository is forked by the fork server, which has
    the libraries every process of the system imports already imported (`forkserver.py`).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{time.monotonic_ns()}.log"
    full_env = {**os.environ, **(env or {})}
    popen: subprocess.Popen[bytes] | ForkedChild
    with log_path.open("wb") as log:
        if fork and cwd is None and list(args[:2]) == PAYMENTS[:2] and SERVER.forks(full_env):
            popen = SERVER.start(args, full_env, REPO_ROOT, log_path)
        else:
            popen = subprocess.Popen(
                list(args),
                cwd=cwd or REPO_ROOT,
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
    process = Process(name=name, popen=popen, log_path=log_path, url=url)
    if ready_url is not None:

        def answers() -> bool:
            if not process.alive():
                raise AssertionError(f"{name} exited early:\n{process.log()}")
            try:
                return httpx.get(ready_url, timeout=1.0).is_success
            except httpx.TransportError:
                return False

        try:
            wait_until(answers, timeout=timeout, message=f"{name} at {ready_url}")
        except AssertionError:
            process.kill()
            raise
    return process
