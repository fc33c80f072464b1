"""A fork server for the system's processes: `python -m app.cli ...` started without paying
again, at every start, for the libraries every one of them imports.

An API, worker or fake provider spends most of its start-up importing: about 0.55 s of CPU
for an API on the 2-core machine, a little over half of it in third-party libraries
(pydantic, FastAPI and its OpenAPI models, SQLAlchemy, psycopg, uvicorn, httpx, jinja2),
the rest in the project's own modules; the suite starts several hundred of them. The fork
server is one process per test process that has imported those libraries once (`PRELOAD`,
and none of the project's modules), and forks a child for every start it is asked for. The
child is then what `subprocess.Popen` would have started: its own pid, the environment,
working directory, argument list and log file asked for, stdin from /dev/null, no other
file descriptor, default signal handlers; it runs the command's module as `__main__`
(`runpy`, as `python -m` does), importing the project's modules itself after its
environment is set, and exits through the interpreter's normal exit (atexit handlers,
flushed output) with the command's exit code.

Left out of `PRELOAD` on purpose: anything that reads the environment when imported
(prometheus_client picks its multi-process mode from `PROMETHEUS_MULTIPROC_DIR`,
opentelemetry its context from `OTEL_PYTHON_CONTEXT`), and the project's own modules. A start
whose environment changes what the interpreter itself reads (`PYTHON*`, `LD_*`) or that asks
for another working directory is started with `subprocess.Popen` instead; so is every start
when `TESTS_FORK_SERVER=0`.

What differs is only what the kernel keeps from the exec: `ps` and /proc/PID/cmdline show a
forked process as `python -m tests.support.control.forkserver SOCKET`, /proc/PID/environ
shows the server's environment (`os.environ` in the process is the one asked for), and its
parent is the server, not the test process (whose rusage of children therefore leaves its
CPU out).

The server's parent is the test process; the server reaps its children and reports each
exit status on the connection the start was asked on (`ForkedChild`, `subprocess.Popen`'s
`pid`, `returncode`, `poll`, `wait`, `send_signal`, `terminate` and `kill`). It exits when
the test process does (its stdin, a pipe from the test process, closes).

    python -m tests.support.control.forkserver SOCKET
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# The libraries every process of the system imports, by what they cost; none reads the
# environment when imported.
PRELOAD = (
    "pydantic",
    "pydantic_settings",
    "fastapi",
    "fastapi.openapi.models",
    "fastapi.routing",
    "starlette.applications",
    "sqlalchemy",
    "sqlalchemy.ext.asyncio",
    "psycopg",
    "psycopg_pool",
    "uvicorn",
    "uvicorn.config",
    "httpx",
    "anyio",
    "jinja2",
    "uvloop",
    "httptools",
)
# The variables that change what the interpreter does before any module runs: a start that
# sets them differently from the server's own environment is not forked.
INTERPRETER_VARIABLES = ("PYTHON", "LD_")
SWITCH = "TESTS_FORK_SERVER"


# The server's side.


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become the process `request` asks for (never returns on error)."""
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # As `python -m` sets it: the working directory first on the path.
        sys.path[0] = request["cwd"]
        sys.argv = [request["module"], *request["args"]]
    except BaseException:
        traceback.print_exc()
        os._exit(127)


def serve(path: str) -> dict[str, Any] | None:
    """Serve starts on the Unix socket at `path` until stdin closes (then None); in a forked
    child, return its request."""
    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "start")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin, selectors.EVENT_READ, "parent")
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}

    def close_all() -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        selector.close()
        listener.close()
        for conn in waiting.values():
            conn.close()
        os.close(wake_r)
        os.close(wake_w)

    while True:
        for key, _ in selector.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 1):
                    close_all()
                    # The socket's folder was made for this server alone.
                    os.unlink(path)
                    os.rmdir(os.path.dirname(path))
                    return None
            elif key.data == "reap":
                os.read(wake_r, 4096)
                while waiting:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    conn = waiting.pop(pid, None)
                    if conn is not None:
                        code = os.waitstatus_to_exitcode(status)
                        with contextlib.suppress(OSError):
                            conn.sendall(f"{code}\n".encode())
                        conn.close()
            else:
                conn, _ = listener.accept()
                with conn.makefile("rb") as reader:
                    request: dict[str, Any] = json.loads(reader.readline())
                pid = os.fork()
                if pid == 0:
                    conn.close()
                    close_all()
                    _child(request)
                    return request
                waiting[pid] = conn
                conn.sendall(f"{pid}\n".encode())


def main() -> None:
    request = serve(sys.argv[1])
    if request is None:
        return
    # The child: run the command as `python -m` would; its SystemExit ends the interpreter.
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


# The test process's side.


class ForkedChild:
    """A process the fork server started, as `subprocess.Popen` shows one."""

    def __init__(self, args: Sequence[str], conn: socket.socket, pid: int):
        self.args = list(args)
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn

    def _read_status(self, timeout: float | None) -> None:
        ready, _, _ = select.select([self._conn], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        line = self._conn.recv(64)
        # No status: the server itself is gone (its test process is ending).
        self.returncode = int(line) if line.strip() else -signal.SIGKILL
        self._conn.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self._read_status(0)
            except subprocess.TimeoutExpired:
                return None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._read_status(timeout)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Server:
    """This test process's fork server, started at the first start asked of it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._path = ""
        self._env: dict[str, str] = {}

    def _started(self, repo_root: Path) -> str:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                folder = tempfile.mkdtemp(prefix="payments-forkserver-")
                self._path = f"{folder}/socket"
                self._env = dict(os.environ)
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.control.forkserver", self._path],
                    cwd=repo_root,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                assert self._process.stdout is not None
                ready = self._process.stdout.readline()
                assert ready == b"ready\n", f"the fork server did not start: {ready!r}"
            return self._path

    def forks(self, env: Mapping[str, str]) -> bool:
        """Whether a start with `env` (the whole environment) may be forked."""
        if os.environ.get(SWITCH, "1") == "0":
            return False
        own = self._env or os.environ

        def interpreter(variables: Mapping[str, str]) -> dict[str, str]:
            return {k: v for k, v in variables.items() if k.startswith(INTERPRETER_VARIABLES)}

        return interpreter(env) == interpreter(own)

    def start(
        self, args: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path
    ) -> ForkedChild:
        assert args[:2] == [sys.executable, "-m"], args
        path = self._started(cwd)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        request = {
            "module": args[2],
            "args": list(args[3:]),
            "env": dict(env),
            "cwd": str(cwd),
            "log": str(log),
        }
        conn.sendall(json.dumps(request).encode() + b"\n")
        line = b""
        while not line.endswith(b"\n"):
            chunk = conn.recv(1)
            assert chunk, "the fork server closed the connection before starting the process"
            line += chunk
        return ForkedChild(args, conn, int(line))


SERVER = _Server()


if __name__ == "__main__":
    main()
