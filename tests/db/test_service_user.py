"""The embedded server's system user, made once however many processes start a server at
once (the suite's workers do, on a machine that has never run it)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import uuid

import pytest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0
    or not any(os.access(os.path.join(d, "useradd"), os.X_OK) for d in ("/usr/sbin", "/sbin")),
    reason="making a system user needs root and useradd",
)

RACERS = 12
RACE = """
import sys
from app.db.embedded import ensure_service_user
ensure_service_user(sys.argv[1])
"""


def test_processes_racing_make_the_user_once() -> None:
    name = f"pay_t{uuid.uuid4().hex[:10]}"
    try:
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACE, name],
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(RACERS)
        ]
        errors = [racer.communicate(timeout=120)[1] for racer in racers]
        assert [racer.returncode for racer in racers] == [0] * RACERS, errors
        assert pwd.getpwnam(name).pw_name == name
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
