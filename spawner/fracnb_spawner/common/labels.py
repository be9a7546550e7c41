"""Kubernetes label syntax: checking label keys and values, and making a valid value from any text.

The apiserver refuses a pod (422) whose label keys or values, or node-selector values, break
these rules, so every spawn of such a profile would fail. Configuration is checked at start
with :func:`label_problem`; free text that fracnb itself puts in a label goes through
:func:`label_value`.
"""

from __future__ import annotations

import hashlib
import re

MAX_VALUE_LENGTH = 63
MAX_PREFIX_LENGTH = 253
_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_HASH_LENGTH = 8
VALUE_RULE = "at most 63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit"


def is_label_value(text: str) -> bool:
    return len(text) <= MAX_VALUE_LENGTH and _VALUE.fullmatch(text) is not None


def value_problem(text: object) -> str | None:
    """Why ``text`` cannot be a label (or node-selector) value, or None if it can."""
    if not isinstance(text, str):
        return f"{text!r} is not a string"
    if is_label_value(text):
        return None
    return f"{text[:80]!r} is not a valid label value ({VALUE_RULE})"


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot be a label (or annotation) key such as ``example.com/team``, or None."""
    if not isinstance(key, str):
        return f"{key!r} is not a string"
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > MAX_PREFIX_LENGTH or _DNS_SUBDOMAIN.fullmatch(prefix) is None):
        return f"{key[:80]!r} is not a valid label key: its prefix must be a DNS subdomain such as example.com"
    if len(name) > MAX_VALUE_LENGTH or _NAME.fullmatch(name) is None:
        return f"{key[:80]!r} is not a valid label key: its name must be {VALUE_RULE}, and not empty"
    return None


def label_problem(key: object, value: object) -> str | None:
    """Why ``key: value`` cannot be a label, or None."""
    return key_problem(key) or value_problem(value)


def label_value(text: str) -> str:
    """``text`` itself when it is a valid label value; else a valid value made from it.

    Characters the syntax forbids become '-', and a short hash of the whole text is
    appended (cutting the text to fit 63 characters), so different texts keep different
    values: "Big GPU!" becomes "Big-GPU-a211c01d".
    """
    if is_label_value(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "-", text)
    stem = cleaned[: MAX_VALUE_LENGTH - _HASH_LENGTH - 1].strip("-_.")
    return f"{stem}-{digest}" if stem else digest
