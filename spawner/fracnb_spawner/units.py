"""Parsing of the quantities admins write in profiles: GPU fractions and byte sizes."""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_BYTE_UNITS = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}
_BYTES_PATTERN = re.compile(r"(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[kmgt]i?)?b?", re.IGNORECASE)
_RATIO_PATTERN = re.compile(r"\s*(?P<num>\d+)\s*/\s*(?P<den>\d+)\s*")
_DECIMAL_PATTERN = re.compile(r"\s*\d+(?:\.\d+)?\s*")

BYTES_EXAMPLE = 'use a size such as "10Gi", "512Mi" or "20G", or a number of bytes'


class QuantityError(ValueError):
    """A quantity in the configuration could not be understood; the message says how to fix it."""


@lru_cache(maxsize=1024)  # pure, and called on every spawn with the same few values
def parse_bytes(value: object) -> int:
    """Return a byte count from an int or a Kubernetes-style size string ("10Gi", "20G", "512Mi")."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a size; {BYTES_EXAMPLE}")
    if isinstance(value, int):
        if value <= 0:
            raise QuantityError(f"{value} bytes is not a positive size; {BYTES_EXAMPLE}")
        return value
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a size; {BYTES_EXAMPLE}")
    match = _BYTES_PATTERN.fullmatch(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a size; {BYTES_EXAMPLE}")
    unit = (match["unit"] or "").lower()
    size = int(Fraction(match["number"]) * _BYTE_UNITS[unit])
    if size <= 0:
        raise QuantityError(f"{value!r} is not a positive size; {BYTES_EXAMPLE}")
    return size


@lru_cache(maxsize=1024)  # pure, and called on every spawn with the same few values
def parse_fraction(value: object) -> Fraction:
    """Return an exact fraction from a number (0.25), a decimal string ("0.25") or a ratio ("1/4").

    Floats are read through their shortest decimal form, so 0.1 means 1/10, not the
    binary approximation.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(repr(value))
    if isinstance(value, str):
        ratio = _RATIO_PATTERN.fullmatch(value)
        if ratio is not None:
            if int(ratio["den"]) == 0:
                raise QuantityError(f"{value!r} divides by zero")
            return Fraction(int(ratio["num"]), int(ratio["den"]))
        if _DECIMAL_PATTERN.fullmatch(value):
            return Fraction(value.strip())
    raise QuantityError(f'{value!r} is not a number; write it as 0.25 or as a ratio such as "1/4"')


def format_fraction(value: Fraction) -> str:
    """Shortest exact text for a fraction: "2", "1/8"."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def format_decimal(value: Fraction, places: int = 6) -> str:
    """Decimal text for env vars and labels: "0.25", "0.333333", "2"."""
    text = f"{float(value):.{places}f}".rstrip("0").rstrip(".")
    return text or "0"


def format_bytes(size: int) -> str:
    """Human text in binary units, as shown on the spawn form: "20 GiB", "9.5 GiB", "512 MiB"."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.1f}".rstrip("0").rstrip(".") + f" {unit}"
    return f"{size} B"


_DURATION_PATTERN = re.compile(r"(?P<number>\d+)\s*(?P<unit>[smhd]?)")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@lru_cache(maxsize=1024)  # pure, and called on every spawn with the same few values
def parse_duration(value: object) -> int:
    """Seconds from an int or a string such as "90s", "30m", "8h", "1d"; 0 means "never"."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a duration")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        match = _DURATION_PATTERN.fullmatch(value.strip().lower())
        if match is not None:
            return int(match["number"]) * _DURATION_UNITS[match["unit"]]
    raise QuantityError(f"{value!r} is not a duration; use seconds or a string such as '30m' or '8h'")
