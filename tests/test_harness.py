"""The suite's own harness: what it changes to keep the suite fast must not change what a
test gets (one TLS context for the test processes' clients; the fork server's starts)."""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.control.forkserver import SWITCH, ForkedChild
from tests.support.control.processes import PAYMENTS, REPO_ROOT, Process, start_process
from tests.support.control.spawner import Spawner
from tests.support.control.tls_context import default_context_is_shared
from tests.support.control.waiting import wait_until


def _context(client: httpx.Client) -> ssl.SSLContext:
    context: ssl.SSLContext = client._transport._pool._ssl_context  # type: ignore[attr-defined]
    return context


def test_clients_asking_for_the_default_tls_context_share_one() -> None:
    assert default_context_is_shared()
    with httpx.Client() as first, httpx.Client(base_url="http://127.0.0.1:1") as second:
        assert _context(first) is _context(second)
        assert _context(first).verify_mode == ssl.CERT_REQUIRED
        assert _context(first).check_hostname


def test_a_client_with_a_context_of_its_own_keeps_it() -> None:
    own = ssl.create_default_context()
    with httpx.Client() as default, httpx.Client(verify=own) as mine:
        assert _context(mine) is own
        assert _context(mine) is not _context(default)
    with httpx.Client(verify=False) as unverified:
        assert _context(unverified).verify_mode == ssl.CERT_NONE
        assert _context(unverified) is not _context(default)


DESCRIBE = [*PAYMENTS[:2], "tests.support.servers.describe"]


def _described(process: Process) -> dict[str, Any]:
    first, second = process.log().splitlines()
    assert second == "described"
    described: dict[str, Any] = json.loads(first)
    assert described.pop("pid") == process.pid
    return described


def test_a_forked_start_is_what_popen_would_have_started(tmp_path: Path) -> None:
    env = {"HARNESS_ONLY_FOR_THIS": "1"}
    forked = start_process("described", [*DESCRIBE, "3"], env=env, log_dir=tmp_path, fork=True)
    popen = start_process("described", [*DESCRIBE, "3"], env=env, log_dir=tmp_path)
    assert isinstance(forked.popen, ForkedChild)
    assert isinstance(popen.popen, subprocess.Popen)
    assert forked.wait_exit() == popen.wait_exit() == 3
    as_forked, as_popen = _described(forked), _described(popen)
    assert as_forked == as_popen
    assert as_forked["env"]["HARNESS_ONLY_FOR_THIS"] == "1"
    assert as_forked["argv"][1:] == ["3"]
    assert as_forked["cwd"] == str(REPO_ROOT)
    assert as_forked["stdin"] == "/dev/null"
    assert as_forked["fds"][:3] == [0, 1, 2]
    assert all(as_forked["default_handlers"].values()), as_forked["default_handlers"]


def test_a_forked_child_reports_its_signals_and_waits_as_popen_does(tmp_path: Path) -> None:
    forked = start_process("waiting", [*DESCRIBE, "wait"], log_dir=tmp_path, fork=True)
    assert isinstance(forked.popen, ForkedChild)
    wait_until(lambda: "described" in forked.log(), message="the child to describe itself")
    assert forked.popen.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        forked.popen.wait(timeout=0.1)
    forked.signal(signal.SIGSTOP)
    forked.signal(signal.SIGCONT)
    assert forked.popen.poll() is None
    assert forked.stop() == -signal.SIGTERM
    assert forked.popen.returncode == -signal.SIGTERM
    forked.signal(signal.SIGKILL)  # after its end: nothing is sent, nothing fails


def test_the_systems_processes_are_forked_unless_the_interpreter_is_set_otherwise(
    spawn: Spawner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert isinstance(spawn.worker(once=True).popen, ForkedChild)
    # What the interpreter reads at its start cannot be given to a fork.
    other = start_process(
        "described", DESCRIBE, env={"PYTHONHASHSEED": "7"}, log_dir=tmp_path, fork=True
    )
    assert isinstance(other.popen, subprocess.Popen)
    assert other.wait_exit() == 0
    monkeypatch.setenv(SWITCH, "0")
    assert isinstance(spawn.worker(once=True).popen, subprocess.Popen)
