"""A RabbitMQ node of the broker chaos run's own: restarted by the run, shared with nothing.

The machine's broker (127.0.0.1:5672) serves other runs and tests, so the run never
restarts it: it starts Debian's `rabbitmq-server` again as a second node, with a node name,
AMQP and distribution ports, data, logs, configuration and Erlang cookie of its own (all in
a temporary folder), restarts that one (`stop_app` / `start_app`) and stops it at the end.
`PrivateBroker.start` raises `BrokerUnavailable`, saying why, when the node cannot start
(no `rabbitmq-server` installed, no free port, a boot failure): the caller skips the run.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from tests.support.control.processes import free_ports

_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
_CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")
_BOOT_TIMEOUT_S = 90


class BrokerUnavailable(RuntimeError):
    """The private node could not be started."""


class PrivateBroker:
    """One RabbitMQ node in `folder`, on ports of its own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.amqp_port, self.dist_port = free_ports(2)
        self.node = f"paychaos{secrets.token_hex(4)}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/"
        self._process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            # The cookie is read from $HOME: a home of its own, a cookie of its own.
            "HOME": str(self.folder / "home"),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.folder / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.folder / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.folder / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.folder / "node.pid"),
        }

    def start(self) -> None:
        """Start the node and wait until it serves AMQP; `BrokerUnavailable` if it cannot."""
        self.launch()
        self.ready()

    def launch(self) -> None:
        """Start the node, not waiting for it (`ready` waits): it boots while the caller
        starts the rest; `BrokerUnavailable` when there is no server to start."""
        if not (_SERVER.exists() and _CTL.exists()):
            raise BrokerUnavailable(f"no RabbitMQ server installed ({_SERVER})")
        for sub in ("home", "mnesia", "log"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        cookie = self.folder / "home" / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16))
        cookie.chmod(0o400)
        (self.folder / "enabled_plugins").write_text("[].\n")
        # A listener on its own port; the guest user stays loopback-only.
        (self.folder / "rabbitmq.conf").write_text(f"listeners.tcp.default = {self.amqp_port}\n")
        with (self.folder / "server.log").open("ab") as log:
            self._process = subprocess.Popen(
                [str(_SERVER)],
                cwd=self.folder,
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def ready(self) -> None:
        """Wait until the node launched serves AMQP; `BrokerUnavailable` if it does not."""
        try:
            self._wait()
        except BrokerUnavailable:
            self.stop()
            raise

    def _wait(self) -> None:
        deadline = time.monotonic() + _BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise BrokerUnavailable(
                    f"rabbitmq-server exited ({self._process.returncode}); see "
                    f"{self.folder / 'server.log'}"
                )
            done = self.ctl("await_startup", timeout=_BOOT_TIMEOUT_S)
            if done.returncode == 0:
                return
            time.sleep(0.5)
        raise BrokerUnavailable(f"the node did not start within {_BOOT_TIMEOUT_S} s")

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`rabbitmqctl -n <node> args`, on this node only."""
        return subprocess.run(
            [str(_CTL), "-n", self.node, *args],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def restart(self, down_s: float) -> None:
        """Stop the broker application (every connection closed, the queues' data kept),
        wait `down_s`, start it again."""
        self.ctl("stop_app", timeout=120)
        time.sleep(down_s)
        self.ctl("start_app", timeout=120)
        self.restarts += 1

    def queue_depth(self, queue: str) -> int | None:
        """Messages in `queue`, ready and unacknowledged; None when the node does not say."""
        done = self.ctl("list_queues", "-q", "--no-table-headers", "name", "messages")
        if done.returncode != 0:
            return None
        for line in done.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == queue and parts[1].isdigit():
                return int(parts[1])
        return None

    def stop(self) -> None:
        """Stop the node (and its Erlang VM) and forget its data."""
        if self._process is not None and self._process.poll() is None:
            self.ctl("stop", timeout=60)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, 9)
                self._process.wait(timeout=30)
        shutil.rmtree(self.folder / "mnesia", ignore_errors=True)
