"""`payments dev` keeps its demo credentials where only their owner can read them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.devserver import (
    DEMO_ADMIN_FILE,
    DEMO_KEY_FILE,
    _demo_admin_token,
    _demo_api_key,
    private_dir,
    write_secret,
)
from app.settings import Settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most common umask, under which new files are world-readable by default."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("open_umask")
def test_the_demo_credentials_are_readable_by_their_owner_only(
    database_url: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    private_dir(data_dir)
    settings = Settings(data_dir=data_dir)

    api_key = _demo_api_key(settings, database_url)
    admin_token = _demo_admin_token(settings, database_url)

    assert _mode(data_dir) == 0o700
    for name, secret in ((DEMO_KEY_FILE, api_key), (DEMO_ADMIN_FILE, admin_token)):
        assert _mode(data_dir / name) == 0o600, name
        assert (data_dir / name).read_text() == secret + "\n"


@pytest.mark.usefixtures("open_umask")
def test_files_and_folders_left_open_by_an_earlier_run_are_closed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    secret = data_dir / DEMO_KEY_FILE
    secret.write_text("old\n")
    secret.chmod(0o644)

    private_dir(data_dir)
    write_secret(secret, "new\n")

    assert _mode(data_dir) == 0o700
    assert _mode(secret) == 0o600
    assert secret.read_text() == "new\n"


def test_a_folder_the_database_user_passes_through_is_never_listable(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    private_dir(data_dir, passable=True)
    assert _mode(data_dir) == 0o711
