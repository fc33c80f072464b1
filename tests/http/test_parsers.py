"""Every parser of request input, fed arbitrary text: it parses, or it raises a 4xx problem.

Header values reach the app as bytes decoded as Latin-1, so headers are fuzzed both as
arbitrary text and as arbitrary bytes decoded that way. JSON bodies are fuzzed as arbitrary
bytes and as JSON whose strings hold anything, lone surrogates included (`\\ud800` escapes).
Whatever is refused must still render as a problem body.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.errors import ProblemError, ValidationFailed, dump_json
from app.http.auth import MAX_API_KEY_LENGTH, bearer_token
from app.http.body import parse_json_object
from app.http.prefer import preferred_wait_s
from app.idempotency.fingerprint import fingerprint
from app.idempotency.keys import MAX_KEY_LENGTH, parse_idempotency_key
from app.payments.schemas import AmountError, CreatePaymentRequest, to_command

# Every code point, with lone surrogates (which Hypothesis leaves out unless told) and
# digits of every script (which `str.isdigit()` accepts and `int()` may not) made common.
# (A plain `st.text()` over such an alphabet drops the surrogates again, hence the join.)
any_char = st.one_of(
    st.characters(codec=None, exclude_categories=()),
    st.integers(0xD800, 0xDFFF).map(chr),
    st.characters(categories=["Nd", "No"]),
)
any_text = st.lists(any_char, max_size=40).map("".join)
header_text = st.one_of(any_text, st.binary().map(lambda raw: raw.decode("latin-1")))


def assert_renders_as_4xx(exc: ProblemError) -> None:
    assert 400 <= exc.status < 500
    body = json.loads(bytes(exc.response().body))
    assert body["code"] == exc.code


def visible_ascii(text: str) -> bool:
    return all(0x21 <= ord(ch) <= 0x7E for ch in text)


@given(st.lists(header_text, max_size=3))
def test_idempotency_key_parses_or_is_a_4xx(values: list[str]) -> None:
    try:
        key = parse_idempotency_key(values)
    except ProblemError as exc:
        assert_renders_as_4xx(exc)
        return
    assert 1 <= len(key) <= MAX_KEY_LENGTH
    assert visible_ascii(key)


@given(st.lists(header_text, max_size=3))
def test_prefer_parses_or_is_ignored(values: list[str]) -> None:
    assert 0.0 <= preferred_wait_s(values, cap_s=10.0) <= 10.0


@example(prefix="wait=", value="\N{SUPERSCRIPT TWO}")
@example(prefix="wait=", value="\N{ARABIC-INDIC DIGIT THREE}")
@given(st.sampled_from(["wait=", " wait = ", "WAIT=", "respond-async, wait="]), header_text)
def test_prefer_wait_with_any_value(prefix: str, value: str) -> None:
    assert 0.0 <= preferred_wait_s([prefix + value], cap_s=10.0) <= 10.0


def test_prefer_wait_accepts_only_ascii_digits() -> None:
    assert preferred_wait_s(["wait=3"], cap_s=10.0) == 3.0
    assert preferred_wait_s(["wait=\N{SUPERSCRIPT TWO}"], cap_s=10.0) == 0.0
    assert preferred_wait_s(["wait=\N{ARABIC-INDIC DIGIT THREE}"], cap_s=10.0) == 0.0
    assert preferred_wait_s(["wait=" + "9" * 5000], cap_s=10.0) == 0.0


@given(st.one_of(st.none(), header_text))
def test_bearer_token_is_a_sane_key_or_none(value: str | None) -> None:
    token = bearer_token(value)
    if token is not None:
        assert 1 <= len(token) <= MAX_API_KEY_LENGTH
        assert visible_ascii(token)


@given(st.sampled_from(["Bearer", "bearer", "BEARER"]), st.text(alphabet="abcXYZ_-09", min_size=1))
def test_bearer_token_reads_a_key(scheme: str, key: str) -> None:
    assert bearer_token(f"{scheme} {key}") == key
    assert bearer_token(f"Basic {key}") is None


@given(any_text)
def test_path_ids_parse_or_raise_value_error(text: str) -> None:
    # The routers answer 404 for the ValueError; anything else would be a 500.
    with contextlib.suppress(ValueError):
        uuid.UUID(text)


@given(st.binary(max_size=512))
def test_arbitrary_body_bytes_parse_or_are_a_4xx(raw: bytes) -> None:
    try:
        parse_json_object(raw)
    except ProblemError as exc:
        assert_renders_as_4xx(exc)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
member_names = st.one_of(
    any_text,
    st.sampled_from(
        ["amount", "currency", "account_id", "merchant_reference", "description", "metadata"]
    ),
)


@st.composite
def json_object_texts(draw: st.DrawFn) -> str:
    """A JSON object as text, possibly with duplicate members, with `\\uXXXX` escapes."""
    members = draw(st.lists(st.tuples(member_names, json_values), max_size=6))
    duplicate: bool = draw(st.booleans())
    if members and duplicate:
        members.append(members[0])  # a duplicate member name
    inner = ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in members)
    return "{" + inner + "}"


@settings(max_examples=300)
@example(text='{"\\ud800": 1, "\\ud800": 2}')
@example(text='{"amount": ' + "1" * 5000 + "}")
@given(json_object_texts())
def test_json_bodies_parse_validate_and_fingerprint_or_are_a_4xx(text: str) -> None:
    try:
        data = parse_json_object(text.encode())
    except ProblemError as exc:
        assert_renders_as_4xx(exc)
        return
    assert_payment_body_is_handled(data)


payment_members = st.fixed_dictionaries(
    {},
    optional={
        "amount": st.one_of(any_text, st.sampled_from(["10.00", "1", "0.5"])),
        "currency": st.one_of(any_text, st.sampled_from(["EUR", "jpy", "usd"])),
        "account_id": any_text,
        "merchant_reference": any_text,
        "description": any_text,
        "metadata": st.dictionaries(any_text, any_text, max_size=3),
    },
)


@settings(max_examples=300)
@given(payment_members)
def test_payment_members_with_any_text_validate_or_are_a_4xx(data: dict[str, Any]) -> None:
    assert_payment_body_is_handled(data)


def assert_payment_body_is_handled(data: dict[str, Any]) -> None:
    """Validation, canonical form and fingerprint succeed, or the refusal renders as a 4xx."""
    try:
        command = to_command(CreatePaymentRequest.model_validate(data))
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in err["loc"]), "message": err["msg"]}
            for err in exc.errors()
        ]
        assert_renders_as_4xx(ValidationFailed("the payment request is invalid", errors=errors))
        return
    except AmountError as exc:
        assert_renders_as_4xx(ValidationFailed(str(exc)))
        return
    assert len(fingerprint("create_payment", command.canonical())) == 64
    dump_json(command.canonical())


@given(any_text, any_text)
def test_any_problem_text_renders(detail: str, field: str) -> None:
    problem = ValidationFailed(detail, errors=[{"field": field, "message": detail}])
    # Surrogates are written as JSON escapes (a pair reads back as the character it encodes).
    assert json.loads(bytes(problem.response().body))["errors"][0]["field"] == json.loads(
        json.dumps(field)
    )
