"""Money amounts: ISO 4217 currencies, decimal strings and integer minor units.

Clients send amounts as decimal strings ("10.50"); everything past the API works in integer
minor units (1050 cents). Conversions use integer arithmetic only: a float cannot hold most
decimal fractions exactly, and money must never be rounded by accident.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

MAX_AMOUNT_MINOR: Final = 999_999_999_999
"""The largest amount accepted, in minor units of any currency.

Twelve digits is far above any single real charge, and keeps amounts (and sums of many of
them) well inside a signed 64-bit column and exact for JSON readers that parse numbers as
doubles (exact up to 2**53). One ceiling in minor units keeps the rule the same everywhere.
"""

CURRENCY_EXPONENTS: Final[Mapping[str, int]] = MappingProxyType(
    {
        # Active ISO 4217 alphabetic codes with their minor-unit exponent, as published in
        # the standard's current-currency list (edition of 2026-01-01). Left out on purpose:
        # codes with no minor unit defined (XAU, XAG, XPD, XPT, XDR, XSU, XUA, XBA-XBD, XTS,
        # XXX) and withdrawn codes (for example BGN, ANG, HRK, SLL, ZWL, CUC, VEF, MRO, STD).
        "AED": 2,  # UAE Dirham
        "AFN": 2,  # Afghani
        "ALL": 2,  # Lek
        "AMD": 2,  # Armenian Dram
        "AOA": 2,  # Kwanza
        "ARS": 2,  # Argentine Peso
        "AUD": 2,  # Australian Dollar
        "AWG": 2,  # Aruban Florin
        "AZN": 2,  # Azerbaijan Manat
        "BAM": 2,  # Convertible Mark
        "BBD": 2,  # Barbados Dollar
        "BDT": 2,  # Taka
        "BHD": 3,  # Bahraini Dinar
        "BIF": 0,  # Burundi Franc
        "BMD": 2,  # Bermudian Dollar
        "BND": 2,  # Brunei Dollar
        "BOB": 2,  # Boliviano
        "BOV": 2,  # Mvdol
        "BRL": 2,  # Brazilian Real
        "BSD": 2,  # Bahamian Dollar
        "BTN": 2,  # Ngultrum
        "BWP": 2,  # Pula
        "BYN": 2,  # Belarusian Ruble
        "BZD": 2,  # Belize Dollar
        "CAD": 2,  # Canadian Dollar
        "CDF": 2,  # Congolese Franc
        "CHE": 2,  # WIR Euro
        "CHF": 2,  # Swiss Franc
        "CHW": 2,  # WIR Franc
        "CLF": 4,  # Unidad de Fomento
        "CLP": 0,  # Chilean Peso
        "CNY": 2,  # Yuan Renminbi
        "COP": 2,  # Colombian Peso
        "COU": 2,  # Unidad de Valor Real
        "CRC": 2,  # Costa Rican Colon
        "CUP": 2,  # Cuban Peso
        "CVE": 2,  # Cabo Verde Escudo
        "CZK": 2,  # Czech Koruna
        "DJF": 0,  # Djibouti Franc
        "DKK": 2,  # Danish Krone
        "DOP": 2,  # Dominican Peso
        "DZD": 2,  # Algerian Dinar
        "EGP": 2,  # Egyptian Pound
        "ERN": 2,  # Nakfa
        "ETB": 2,  # Ethiopian Birr
        "EUR": 2,  # Euro
        "FJD": 2,  # Fiji Dollar
        "FKP": 2,  # Falkland Islands Pound
        "GBP": 2,  # Pound Sterling
        "GEL": 2,  # Lari
        "GHS": 2,  # Ghana Cedi
        "GIP": 2,  # Gibraltar Pound
        "GMD": 2,  # Dalasi
        "GNF": 0,  # Guinean Franc
        "GTQ": 2,  # Quetzal
        "GYD": 2,  # Guyana Dollar
        "HKD": 2,  # Hong Kong Dollar
        "HNL": 2,  # Lempira
        "HTG": 2,  # Gourde
        "HUF": 2,  # Forint
        "IDR": 2,  # Rupiah
        "ILS": 2,  # New Israeli Sheqel
        "INR": 2,  # Indian Rupee
        "IQD": 3,  # Iraqi Dinar
        "IRR": 2,  # Iranian Rial
        "ISK": 0,  # Iceland Krona
        "JMD": 2,  # Jamaican Dollar
        "JOD": 3,  # Jordanian Dinar
        "JPY": 0,  # Yen
        "KES": 2,  # Kenyan Shilling
        "KGS": 2,  # Som
        "KHR": 2,  # Riel
        "KMF": 0,  # Comorian Franc
        "KPW": 2,  # North Korean Won
        "KRW": 0,  # Won
        "KWD": 3,  # Kuwaiti Dinar
        "KYD": 2,  # Cayman Islands Dollar
        "KZT": 2,  # Tenge
        "LAK": 2,  # Lao Kip
        "LBP": 2,  # Lebanese Pound
        "LKR": 2,  # Sri Lanka Rupee
        "LRD": 2,  # Liberian Dollar
        "LSL": 2,  # Loti
        "LYD": 3,  # Libyan Dinar
        "MAD": 2,  # Moroccan Dirham
        "MDL": 2,  # Moldovan Leu
        "MGA": 2,  # Malagasy Ariary
        "MKD": 2,  # Denar
        "MMK": 2,  # Kyat
        "MNT": 2,  # Tugrik
        "MOP": 2,  # Pataca
        "MRU": 2,  # Ouguiya
        "MUR": 2,  # Mauritius Rupee
        "MVR": 2,  # Rufiyaa
        "MWK": 2,  # Malawi Kwacha
        "MXN": 2,  # Mexican Peso
        "MXV": 2,  # Mexican Unidad de Inversion (UDI)
        "MYR": 2,  # Malaysian Ringgit
        "MZN": 2,  # Mozambique Metical
        "NAD": 2,  # Namibia Dollar
        "NGN": 2,  # Naira
        "NIO": 2,  # Cordoba Oro
        "NOK": 2,  # Norwegian Krone
        "NPR": 2,  # Nepalese Rupee
        "NZD": 2,  # New Zealand Dollar
        "OMR": 3,  # Rial Omani
        "PAB": 2,  # Balboa
        "PEN": 2,  # Sol
        "PGK": 2,  # Kina
        "PHP": 2,  # Philippine Peso
        "PKR": 2,  # Pakistan Rupee
        "PLN": 2,  # Zloty
        "PYG": 0,  # Guarani
        "QAR": 2,  # Qatari Rial
        "RON": 2,  # Romanian Leu
        "RSD": 2,  # Serbian Dinar
        "RUB": 2,  # Russian Ruble
        "RWF": 0,  # Rwanda Franc
        "SAR": 2,  # Saudi Riyal
        "SBD": 2,  # Solomon Islands Dollar
        "SCR": 2,  # Seychelles Rupee
        "SDG": 2,  # Sudanese Pound
        "SEK": 2,  # Swedish Krona
        "SGD": 2,  # Singapore Dollar
        "SHP": 2,  # Saint Helena Pound
        "SLE": 2,  # Leone
        "SOS": 2,  # Somali Shilling
        "SRD": 2,  # Surinam Dollar
        "SSP": 2,  # South Sudanese Pound
        "STN": 2,  # Dobra
        "SVC": 2,  # El Salvador Colon
        "SYP": 2,  # Syrian Pound
        "SZL": 2,  # Lilangeni
        "THB": 2,  # Baht
        "TJS": 2,  # Somoni
        "TMT": 2,  # Turkmenistan New Manat
        "TND": 3,  # Tunisian Dinar
        "TOP": 2,  # Pa'anga
        "TRY": 2,  # Turkish Lira
        "TTD": 2,  # Trinidad and Tobago Dollar
        "TWD": 2,  # New Taiwan Dollar
        "TZS": 2,  # Tanzanian Shilling
        "UAH": 2,  # Hryvnia
        "UGX": 0,  # Uganda Shilling
        "USD": 2,  # US Dollar
        "USN": 2,  # US Dollar (Next day)
        "UYI": 0,  # Uruguay Peso en Unidades Indexadas (UI)
        "UYU": 2,  # Peso Uruguayo
        "UYW": 4,  # Unidad Previsional
        "UZS": 2,  # Uzbekistan Sum
        "VED": 2,  # Bolivar Soberano (digital)
        "VES": 2,  # Bolivar Soberano
        "VND": 0,  # Dong
        "VUV": 0,  # Vatu
        "WST": 2,  # Tala
        "XAD": 2,  # Arab Accounting Dinar
        "XAF": 0,  # CFA Franc BEAC
        "XCD": 2,  # East Caribbean Dollar
        "XCG": 2,  # Caribbean Guilder
        "XOF": 0,  # CFA Franc BCEAO
        "XPF": 0,  # CFP Franc
        "YER": 2,  # Yemeni Rial
        "ZAR": 2,  # Rand
        "ZMW": 2,  # Zambian Kwacha
        "ZWG": 2,  # Zimbabwe Gold
    }
)
"""Minor-unit exponent per upper-case currency code: an amount of 1 unit is 10**exponent."""

# ASCII digits only: `\d` would also accept other scripts' digits.
_AMOUNT = re.compile(r"([0-9]+)(?:\.([0-9]+))?")
_MAX_WHOLE_DIGITS = len(str(MAX_AMOUNT_MINOR))


class UnknownCurrency(ValueError):
    """The code is not an active ISO 4217 currency with a defined minor unit."""


class InvalidAmount(ValueError):
    """The amount string is not an acceptable amount in its currency; the message says why."""


def normalize_currency(code: str) -> str:
    """The upper-case form of `code`, accepted in any case; raises `UnknownCurrency`."""
    # Only ASCII is upper-cased: str.upper() maps some other letters to ASCII ones
    # ("\u017f".upper() == "S"), which would let a look-alike string pass as a real code.
    upper = code.upper() if code.isascii() else code
    if upper not in CURRENCY_EXPONENTS:
        raise UnknownCurrency(f"{code[:16]!r} is not an active ISO 4217 currency code")
    return upper


def currency_exponent(code: str) -> int:
    """The number of fraction digits of `code` (2 for EUR, 0 for JPY, 3 for KWD).

    `code` is case-insensitive. Raises `UnknownCurrency` for anything not in the table.
    """
    return CURRENCY_EXPONENTS[normalize_currency(code)]


def to_minor_units(amount: str, currency: str) -> int:
    """Convert a decimal amount string to integer minor units of `currency`.

    "10.5" EUR -> 1050, "500" JPY -> 500, "1.234" KWD -> 1234. The amount must be ASCII digits
    with an optional "." followed by at least one digit: no sign, exponent, spaces or
    separators. It must be greater than zero, have no more fraction digits than the currency
    allows (none at all, not even ".0", for a currency without minor units), and be at most
    `MAX_AMOUNT_MINOR` minor units. Raises `InvalidAmount` (or `UnknownCurrency`).
    """
    code = normalize_currency(currency)
    exponent = CURRENCY_EXPONENTS[code]
    match = _AMOUNT.fullmatch(amount)
    if match is None:
        raise InvalidAmount(
            "amount must be a decimal string of digits with an optional '.' and fraction "
            "digits, such as '10.50'; no sign, exponent or spaces"
        )
    whole, fraction = match.group(1), match.group(2)
    if fraction is not None and len(fraction) > exponent:
        raise InvalidAmount(_fraction_message(len(fraction), code, exponent))

    whole = whole.lstrip("0")
    # Checked before int(): a huge digit string is rejected without converting it.
    if len(whole) > _MAX_WHOLE_DIGITS:
        raise InvalidAmount(_too_large_message(code))
    scale: int = 10**exponent
    fraction_minor = int((fraction or "").ljust(exponent, "0") or "0")
    minor = int(whole or "0") * scale + fraction_minor
    if minor == 0:
        raise InvalidAmount("amount must be greater than zero")
    if minor > MAX_AMOUNT_MINOR:
        raise InvalidAmount(_too_large_message(code))
    return minor


def format_minor_units(amount_minor: int, currency: str) -> str:
    """The canonical decimal string for an amount in minor units.

    Exactly `currency_exponent(currency)` fraction digits: 1050 EUR -> "10.50", 5 EUR ->
    "0.05", 500 JPY -> "500". The inverse of `to_minor_units` for every amount it accepts.
    """
    exponent = currency_exponent(currency)
    sign = "-" if amount_minor < 0 else ""
    digits = str(abs(amount_minor)).rjust(exponent + 1, "0")
    if exponent == 0:
        return sign + digits
    return f"{sign}{digits[:-exponent]}.{digits[-exponent:]}"


def _fraction_message(count: int, code: str, exponent: int) -> str:
    digits = "fraction digit" if count == 1 else "fraction digits"
    allowed = "none" if exponent == 0 else str(exponent)
    return f"amount has {count} {digits}; {code} allows {allowed}"


def _too_large_message(code: str) -> str:
    return f"amount exceeds the maximum of {format_minor_units(MAX_AMOUNT_MINOR, code)} {code}"
