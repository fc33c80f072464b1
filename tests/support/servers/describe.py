"""A program that says how it was started, for the fork server's tests.

    python -m tests.support.servers.describe [EXIT_CODE]

Writes one JSON line to stdout (and `described` to stderr): its argument list, working
directory, environment, first entry of `sys.path`, its open file descriptors and what its
stdin is, whether its signal handlers are the defaults, and its pid; then exits with
EXIT_CODE (0 by default), or waits to be signalled when EXIT_CODE is `wait`.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def main() -> None:
    handlers = {
        name: signal.getsignal(getattr(signal, name)) == signal.SIG_DFL
        for name in ("SIGTERM", "SIGCHLD", "SIGHUP")
    }
    described = {
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "path0": sys.path[0],
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "stdin": os.readlink("/proc/self/fd/0"),
        "default_handlers": handlers,
        "pid": os.getpid(),
    }
    print(json.dumps(described), flush=True)
    print("described", file=sys.stderr, flush=True)
    code = sys.argv[1] if len(sys.argv) > 1 else "0"
    if code == "wait":
        signal.pause()
    raise SystemExit(int(code))


if __name__ == "__main__":
    main()
