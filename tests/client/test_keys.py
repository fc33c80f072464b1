"""UUIDv7 keys, the key header, and that the client package stands on its own."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.idempotency.keys import parse_idempotency_key
from client import new_idempotency_key, uuid7
from client.keys import check_idempotency_key, idempotency_key_header, uuid7_unix_ms
from tests.support.control.processes import REPO_ROOT


@given(
    unix_ms=st.integers(min_value=0, max_value=2**48 - 1),
    random_bytes=st.binary(min_size=10, max_size=10),
)
def test_uuid7_layout(unix_ms: int, random_bytes: bytes) -> None:
    value = uuid7(unix_ms=unix_ms, random_bytes=random_bytes)
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert uuid7_unix_ms(value) == unix_ms
    # The 74 random bits are the input's, less the bits version and variant replace.
    assert (value.int >> 64) & 0xFFF == int.from_bytes(random_bytes[:2], "big") & 0xFFF
    assert value.int & (2**62 - 1) == int.from_bytes(random_bytes[2:], "big") & (2**62 - 1)


def test_uuid7_is_now_and_sorts_by_time() -> None:
    before = time.time_ns() // 1_000_000
    value = uuid7()
    after = time.time_ns() // 1_000_000
    assert before <= uuid7_unix_ms(value) <= after
    earlier = uuid7(unix_ms=1_000, random_bytes=b"\xff" * 10)
    later = uuid7(unix_ms=1_001, random_bytes=b"\x00" * 10)
    assert str(earlier) < str(later)


def test_new_keys_are_unique_uuid7_strings() -> None:
    keys = {new_idempotency_key() for _ in range(2000)}
    assert len(keys) == 2000
    assert all(uuid.UUID(k).version == 7 and len(k) == 36 for k in keys)


def test_uuid7_refuses_out_of_range_input() -> None:
    with pytest.raises(ValueError, match="48 bits"):
        uuid7(unix_ms=2**48)
    with pytest.raises(ValueError, match="10 bytes"):
        uuid7(random_bytes=b"short")


@given(
    st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=255
    )
)
def test_the_key_header_names_exactly_the_key_on_the_server(key: str) -> None:
    assert check_idempotency_key(key) == key
    assert parse_idempotency_key([idempotency_key_header(key)]) == key


@pytest.mark.parametrize("key", ["", "a b", "é", "x" * 256, "tab\there"])
def test_keys_the_api_would_refuse_are_refused_locally(key: str) -> None:
    with pytest.raises(ValueError, match="idempotency key"):
        check_idempotency_key(key)


def test_the_client_imports_nothing_of_the_server() -> None:
    code = (
        "import sys, client, client.cli\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('app', 'worker', 'fake_provider', 'fastapi', 'pydantic', 'sqlalchemy'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)
