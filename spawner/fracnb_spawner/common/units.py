"""Parsing of the quantities admins write in profiles: GPU fractions and byte sizes."""

from __future__ import annotations

import math
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
# Digit counts are bounded: no sane quantity needs more, and int() refuses very long digit strings.
_BYTES_PATTERN = re.compile(r"(?P<number>\d{1,20}(?:\.\d{1,20})?)\s*(?P<unit>[kmgt]i?)?b?", re.IGNORECASE)
_RATIO_PATTERN = re.compile(r"\s*(?P<num>\d{1,20})\s*/\s*(?P<den>\d{1,20})\s*")
_DECIMAL_PATTERN = re.compile(r"\s*\d{1,20}(?:\.\d{1,20})?\s*")

FRACTION_EXAMPLE = 'write it as 0.25 or as a ratio such as "1/4"'
BYTES_EXAMPLE = 'use a size such as "10Gi", "512Mi" or "20G", or a number of bytes'


class QuantityError(ValueError):
    """A quantity in the configuration could not be understood; the message says how to fix it."""


def _shown(value: object) -> str:
    """A value for an error message: its repr, cut short (it may come from a hostile or huge config)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_bytes(value: object) -> int:
    """Return a byte count from an int or a Kubernetes-style size string ("10Gi", "20G", "512Mi")."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise QuantityError(f"{_shown(value)} is not a size; {BYTES_EXAMPLE}")
    return _parse_bytes(value)


# The caches are typed: 1, 1.0 and True hash alike and must not share an answer. Only
# hashable scalars reach them (a list would raise TypeError from inside lru_cache).
@lru_cache(maxsize=1024, typed=True)  # pure, and called on every spawn with the same few values
def _parse_bytes(value: int | str) -> int:
    if isinstance(value, int):
        if value <= 0:
            raise QuantityError(f"{value} bytes is not a positive size; {BYTES_EXAMPLE}")
        return value
    match = _BYTES_PATTERN.fullmatch(value.strip())
    if match is None:
        raise QuantityError(f"{_shown(value)} is not a size; {BYTES_EXAMPLE}")
    unit = (match["unit"] or "").lower()
    size = int(Fraction(match["number"]) * _BYTE_UNITS[unit])
    if size <= 0:
        raise QuantityError(f"{_shown(value)} is not a positive size; {BYTES_EXAMPLE}")
    return size


def parse_fraction(value: object) -> Fraction:
    """Return an exact fraction from a number (0.25), a decimal string ("0.25") or a ratio ("1/4").

    Floats are read through their shortest decimal form, so 0.1 means 1/10, not the
    binary approximation. NaN and infinities are refused.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise QuantityError(f"{_shown(value)} is not a number; {FRACTION_EXAMPLE}")
    return _parse_fraction(value)


@lru_cache(maxsize=1024, typed=True)  # pure, and called on every spawn with the same few values
def _parse_fraction(value: int | float | str) -> Fraction:
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a finite number")
        return Fraction(repr(value))
    if isinstance(value, str):
        ratio = _RATIO_PATTERN.fullmatch(value)
        if ratio is not None:
            if int(ratio["den"]) == 0:
                raise QuantityError(f"{value!r} divides by zero")
            return Fraction(int(ratio["num"]), int(ratio["den"]))
        if _DECIMAL_PATTERN.fullmatch(value):
            return Fraction(value.strip())
    raise QuantityError(f"{_shown(value)} is not a number; {FRACTION_EXAMPLE}")


def format_fraction(value: Fraction) -> str:
    """Shortest exact text for a fraction: "2", "1/8"."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def format_decimal(value: Fraction, places: int = 6) -> str:
    """Decimal text for env vars and labels: "0.25", "0.333333", "2"."""
    text = f"{float(value):.{places}f}".rstrip("0").rstrip(".")
    return text or "0"


def rounded_text(value: float, places: int) -> str:
    """``value`` to ``places`` decimals, halves up, without trailing zeros: 1.25 -> "1.3", 2.0 -> "2".

    The notebook side and the front end round with the same float arithmetic, so a quantity reads
    the same everywhere (extension/test-data/byte-sizes.json and gpu-shares.json hold all three)."""
    scale = 10**places
    text = f"{math.floor(value * scale + 0.5) / scale:.{places}f}"
    return text.rstrip("0").rstrip(".") if places else text


def format_bytes(size: int) -> str:
    """Human text in binary units, as shown on the spawn form: "20 GiB", "9.5 GiB", "512 MiB", "0 B".

    The largest unit in which the size, to one decimal (halves up), is at least 1; below 1 KiB, bytes."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        text = rounded_text(size / factor, 1)
        if float(text) >= 1:
            return f"{text} {unit}"
    return f"{size} B"


_DURATION_PATTERN = re.compile(r"(?P<number>\d{1,12})\s*(?P<unit>[smhd]?)")
DURATION_EXAMPLE = "use seconds or a string such as '30m' or '8h'"
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: object) -> int:
    """Seconds from an int or a string such as "90s", "30m", "8h", "1d"; 0 means "never"."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise QuantityError(f"{_shown(value)} is not a duration; {DURATION_EXAMPLE}")
    return _parse_duration(value)


@lru_cache(maxsize=1024, typed=True)  # pure, and called on every spawn with the same few values
def _parse_duration(value: int | str) -> int:
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        match = _DURATION_PATTERN.fullmatch(value.strip().lower())
        if match is not None:
            return int(match["number"]) * _DURATION_UNITS[match["unit"]]
    raise QuantityError(f"{_shown(value)} is not a duration; {DURATION_EXAMPLE}")


# ---- GPU amounts in words (the cases both sides are held to: extension/test-data/gpu-shares.json) -----


def format_gpus(amount: Fraction) -> str:
    """Human form of an amount: ``0.125``, ``5.75``, ``2``; thirds show as ``0.333`` (halves up).

    The wording of amounts is shared with the notebook side: extension/test-data/gpu-shares.json."""
    return rounded_text(float(amount), 3)


def _gpu_unit(amount: str) -> str:
    return "GPU" if 0 < float(amount) <= 1 else "GPUs"


def gpus_text(amount: Fraction) -> str:
    """An amount held or allowed: ``0 GPUs``, ``0.25 GPU``, ``1 GPU``, ``2 GPUs``."""
    written = format_gpus(amount)
    return f"{written} {_gpu_unit(written)}"


def share_words(amount: Fraction) -> str:
    """A server's share: ``0.25 GPU``, ``2 GPUs``, and ``no GPU`` for none."""
    written = format_gpus(amount)
    return "no GPU" if float(written) == 0 else f"{written} {_gpu_unit(written)}"


def use_text(used: Fraction, limit: Fraction) -> str:
    """A use against a limit, in the limit's unit: ``0 of 1 GPU``, ``0.75 of 2 GPUs``."""
    written = format_gpus(limit)
    return f"{format_gpus(used)} of {written} {_gpu_unit(written)}"


def held_words(total: Fraction, waiting: Fraction = Fraction(0)) -> str:
    """GPUs held, saying which part only waits in the GPU queue: "0.5 GPU", "0.25 GPU + 0.25 GPU (waiting)",
    "0.25 GPU (waiting)"."""
    if waiting <= 0:
        return gpus_text(total)
    held = total - waiting
    return f"{gpus_text(waiting)} (waiting)" if held <= 0 else f"{gpus_text(held)} + {gpus_text(waiting)} (waiting)"


def share_text(amount: Fraction | None) -> str:
    """An amount held or allowed, as the form and the meter write it: "0 GPUs", "0.25 GPU", "1.5 GPUs"
    (:func:`gpus_text`); ``None`` is "no limit"."""
    return "no limit" if amount is None else gpus_text(amount)
