"""Tests of amount parsing and formatting, and of the currency table."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.payments.money import (
    CURRENCY_EXPONENTS,
    MAX_AMOUNT_MINOR,
    InvalidAmount,
    UnknownCurrency,
    currency_exponent,
    format_minor_units,
    normalize_currency,
    to_minor_units,
)

ZERO_DIGIT = {
    "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG",
    "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF",
}  # fmt: skip
THREE_DIGIT = {"BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"}
FOUR_DIGIT = {"CLF", "UYW"}

# --- the table -----------------------------------------------------------------------------


def test_exponents_other_than_two_are_exactly_the_known_ones() -> None:
    by_exponent: dict[int, set[str]] = {}
    for code, exponent in CURRENCY_EXPONENTS.items():
        by_exponent.setdefault(exponent, set()).add(code)

    assert by_exponent[0] == ZERO_DIGIT
    assert by_exponent[3] == THREE_DIGIT
    assert by_exponent[4] == FOUR_DIGIT
    assert set(by_exponent) == {0, 2, 3, 4}


def test_codes_are_three_upper_case_letters() -> None:
    assert all(re.fullmatch(r"[A-Z]{3}", code) for code in CURRENCY_EXPONENTS)


@pytest.mark.parametrize(
    "code",
    ["EUR", "USD", "GBP", "CHF", "VES", "VED", "SLE", "STN", "MRU", "ZWG", "XCG", "CUP", "SVC"],
)
def test_current_codes_are_present(code: str) -> None:
    assert code in CURRENCY_EXPONENTS


@pytest.mark.parametrize(
    "code",
    [
        # no minor unit defined
        "XAU", "XAG", "XPT", "XPD", "XDR", "XSU", "XUA", "XBA", "XBB", "XBC", "XBD", "XTS",
        "XXX",
        # withdrawn
        "VEF", "MRO", "STD", "SLL", "ZWL", "HRK", "LTL", "CUC", "DEM",
    ],
)  # fmt: skip
def test_codes_without_minor_unit_or_withdrawn_are_absent(code: str) -> None:
    assert code not in CURRENCY_EXPONENTS
    with pytest.raises(UnknownCurrency):
        currency_exponent(code)


def test_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        CURRENCY_EXPONENTS["ABC"] = 2  # type: ignore[index]


# --- currency_exponent / normalize_currency ------------------------------------------------


@pytest.mark.parametrize(
    ("code", "exponent"),
    [("EUR", 2), ("eur", 2), ("Jpy", 0), ("kwd", 3), ("CLF", 4), ("uyw", 4), ("ZWG", 2)],
)
def test_currency_exponent(code: str, exponent: int) -> None:
    assert currency_exponent(code) == exponent


def test_normalize_currency_upper_cases() -> None:
    assert normalize_currency("eUr") == "EUR"


@pytest.mark.parametrize(
    "code",
    [
        "",
        "EU",
        "EURO",
        " EUR",
        "EUR ",
        "E1R",
        "ABC",
        "u\u017fd",  # the long s upper-cases to "S": must not pass as USD
        "\u0131nr",  # the dotless i upper-cases to "I": must not pass as INR
    ],
)
def test_unknown_currency(code: str) -> None:
    with pytest.raises(UnknownCurrency, match="not an active ISO 4217 currency code"):
        currency_exponent(code)


def test_unknown_currency_is_a_value_error() -> None:
    assert issubclass(UnknownCurrency, ValueError)
    assert issubclass(InvalidAmount, ValueError)


# --- to_minor_units ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        ("10.00", "EUR", 1000),
        ("10.5", "EUR", 1050),
        ("10", "EUR", 1000),
        ("0.01", "eur", 1),
        ("007.50", "USD", 750),
        ("500", "JPY", 500),
        ("1", "JPY", 1),
        ("1.234", "KWD", 1234),
        ("1.2", "BHD", 1200),
        ("1.2345", "CLF", 12345),
        ("0.0001", "UYW", 1),
        ("9999999999.99", "EUR", MAX_AMOUNT_MINOR),
        ("999999999999", "JPY", MAX_AMOUNT_MINOR),
        ("999999999.999", "KWD", MAX_AMOUNT_MINOR),
    ],
)
def test_to_minor_units(amount: str, currency: str, minor: int) -> None:
    assert to_minor_units(amount, currency) == minor


@pytest.mark.parametrize(
    "amount",
    [
        "",
        ".",
        ".5",
        "10.",
        "-10.00",
        "+10.00",
        "1e3",
        "1E3",
        "10,00",
        "1,000.00",
        "1_000",
        " 10.00",
        "10.00 ",
        "10.00\n",
        "10 .00",
        "1.2.3",
        "NaN",
        "Infinity",
        "0x10",
        "\u0661\u0660",  # Arabic-Indic digits
        "\uff11\uff10",  # full-width digits
    ],
)
def test_malformed_amounts(amount: str) -> None:
    with pytest.raises(InvalidAmount, match="decimal string"):
        to_minor_units(amount, "EUR")


@pytest.mark.parametrize(
    ("amount", "currency", "message"),
    [
        ("10.500", "EUR", "amount has 3 fraction digits; EUR allows 2"),
        ("10.001", "USD", "amount has 3 fraction digits; USD allows 2"),
        ("1.2345", "KWD", "amount has 4 fraction digits; KWD allows 3"),
        ("1.00000", "CLF", "amount has 5 fraction digits; CLF allows 4"),
        ("500.0", "JPY", "amount has 1 fraction digit; JPY allows none"),
        ("500.00", "jpy", "amount has 2 fraction digits; JPY allows none"),
    ],
)
def test_too_many_fraction_digits(amount: str, currency: str, message: str) -> None:
    with pytest.raises(InvalidAmount) as caught:
        to_minor_units(amount, currency)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("amount", "currency"),
    [("0", "EUR"), ("0.00", "EUR"), ("000", "EUR"), ("0.0", "KWD"), ("0", "JPY")],
)
def test_zero_is_rejected(amount: str, currency: str) -> None:
    with pytest.raises(InvalidAmount, match="greater than zero"):
        to_minor_units(amount, currency)


@pytest.mark.parametrize(
    ("amount", "currency", "limit"),
    [
        ("10000000000.00", "EUR", "9999999999.99 EUR"),
        ("10000000000", "EUR", "9999999999.99 EUR"),
        ("1000000000000", "JPY", "999999999999 JPY"),
        ("1000000000", "KWD", "999999999.999 KWD"),
        ("1" * 10_000, "EUR", "9999999999.99 EUR"),
        ("0" * 50 + "10000000000", "EUR", "9999999999.99 EUR"),
    ],
)
def test_over_the_maximum_is_rejected(amount: str, currency: str, limit: str) -> None:
    with pytest.raises(InvalidAmount) as caught:
        to_minor_units(amount, currency)
    assert str(caught.value) == f"amount exceeds the maximum of {limit}"


def test_leading_zeros_do_not_count_against_the_maximum() -> None:
    assert to_minor_units("0" * 50 + "1.00", "EUR") == 100


def test_unknown_currency_is_reported_before_the_amount() -> None:
    with pytest.raises(UnknownCurrency):
        to_minor_units("not a number", "XYZ")


# --- format_minor_units --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("minor", "currency", "text"),
    [
        (1050, "EUR", "10.50"),
        (1000, "EUR", "10.00"),
        (5, "EUR", "0.05"),
        (0, "EUR", "0.00"),
        (500, "JPY", "500"),
        (1, "jpy", "1"),
        (1234, "KWD", "1.234"),
        (7, "KWD", "0.007"),
        (12345, "CLF", "1.2345"),
        (MAX_AMOUNT_MINOR, "EUR", "9999999999.99"),
        (-1050, "EUR", "-10.50"),
        (-5, "EUR", "-0.05"),
    ],
)
def test_format_minor_units(minor: int, currency: str, text: str) -> None:
    assert format_minor_units(minor, currency) == text


def test_format_unknown_currency() -> None:
    with pytest.raises(UnknownCurrency):
        format_minor_units(100, "ABC")


# --- properties ----------------------------------------------------------------------------

currencies = st.sampled_from(sorted(CURRENCY_EXPONENTS))


@st.composite
def valid_amounts(draw: st.DrawFn) -> tuple[str, str, int]:
    """A currency, an amount string `to_minor_units` accepts for it, and its minor units."""
    currency = draw(currencies)
    exponent = CURRENCY_EXPONENTS[currency]
    minor = draw(st.integers(min_value=1, max_value=MAX_AMOUNT_MINOR))
    whole, fraction = divmod(minor, 10**exponent)
    leading_zeros = draw(st.integers(min_value=0, max_value=3))
    text = "0" * leading_zeros + str(whole)
    if exponent:
        digits = str(fraction).rjust(exponent, "0")
        # Any number of the fraction digits may be written, as long as none is lost.
        kept = draw(st.integers(min_value=len(digits.rstrip("0")), max_value=exponent))
        if kept:
            text += "." + digits[:kept]
    return text, draw(st.sampled_from([currency, currency.lower()])), minor


@given(st.integers(min_value=1, max_value=MAX_AMOUNT_MINOR), currencies)
def test_minor_units_round_trip_through_the_canonical_string(minor: int, currency: str) -> None:
    assert to_minor_units(format_minor_units(minor, currency), currency) == minor


@given(valid_amounts())
def test_valid_amounts_round_trip_to_their_canonical_string(case: tuple[str, str, int]) -> None:
    amount, currency, minor = case
    exponent = currency_exponent(currency)
    # An independent oracle: the same value, quantized to the currency's digits by Decimal.
    expected = f"{Decimal(amount).quantize(Decimal(1).scaleb(-exponent)):f}"

    assert to_minor_units(amount, currency) == minor
    assert format_minor_units(to_minor_units(amount, currency), currency) == expected
    assert to_minor_units(expected, currency) == minor
