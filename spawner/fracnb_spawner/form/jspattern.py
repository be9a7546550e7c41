"""An HTML ``pattern`` attribute from a Python ``validation_regex``, or None when none is safe.

Browsers compile ``pattern`` as ``new RegExp("^(?:" + pattern + ")$", "v")``. Python regex
syntax differs from that: ``[a-z-]`` is an error under the ``v`` flag, so a pattern copied as
is silently switches client-side checking off. This rewrites the parsed Python regex into
``v``-flag syntax (every character other than ASCII letters and digits as ``\\u{...}``,
Python's Unicode ``\\d``/``\\w`` as property classes) and gives up, returning None, on what
has no exact counterpart (inline flags, word boundaries, possessive or atomic groups,
conditionals). The server's ``re.fullmatch`` stays the check that counts; the attribute only
spares the user a round trip.
"""

from __future__ import annotations

import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    from re import _parser as _sre_parse
else:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse

MAX_PATTERN_LENGTH = 1000
_ALLOWED_FLAGS = re.UNICODE  # set on every str pattern; any other flag changes the meaning
_CATEGORIES = {
    "CATEGORY_DIGIT": r"\p{Nd}",
    "CATEGORY_NOT_DIGIT": r"\P{Nd}",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"[\p{L}\p{N}_]",
    "CATEGORY_NOT_WORD": r"[^\p{L}\p{N}_]",
}
_ANCHORS = {"AT_BEGINNING": "^", "AT_BEGINNING_STRING": "^", "AT_END": "$", "AT_END_STRING": "$"}


class _UntranslatableError(Exception):
    """The regex uses something the ``v`` flag cannot express exactly."""


def html_pattern(regex: str | None) -> str | None:
    """The ``v``-flag equivalent of ``regex`` for an HTML ``pattern`` attribute, or None."""
    if not regex or len(regex) > MAX_PATTERN_LENGTH:
        return None
    try:
        parsed = _sre_parse.parse(regex)
        if parsed.state.flags & ~_ALLOWED_FLAGS:
            return None
        return _sequence(parsed)
    except (_UntranslatableError, re.error, RecursionError):
        return None


def _sequence(items: Any) -> str:
    return "".join(_item(op.name, argument) for op, argument in items)


def _item(name: str, argument: Any) -> str:  # noqa: PLR0911 - one case per regex construct
    if name == "LITERAL":
        return _char(argument)
    if name == "NOT_LITERAL":
        return f"[^{_char(argument)}]"
    if name == "ANY":
        return "."
    if name == "IN":
        return _class(argument)
    if name == "AT" and argument.name in _ANCHORS:
        return _ANCHORS[argument.name]
    if name == "BRANCH":
        return "(?:" + "|".join(_sequence(branch) for branch in argument[1]) + ")"
    if name == "SUBPATTERN":
        _group, add_flags, del_flags, items = argument
        if add_flags or del_flags:
            raise _UntranslatableError
        # Every group captures, so group numbers (and backreferences) stay as in Python.
        return "(" + _sequence(items) + ")"
    if name == "GROUPREF":
        return f"(?:\\{argument})"
    if name in ("MAX_REPEAT", "MIN_REPEAT"):
        low, high, items = argument
        lazy = "?" if name == "MIN_REPEAT" else ""
        return f"(?:{_sequence(items)}){_quantifier(low, high)}{lazy}"
    if name in ("ASSERT", "ASSERT_NOT"):
        direction, items = argument
        kind = ("=" if name == "ASSERT" else "!") if direction == 1 else ("<=" if name == "ASSERT" else "<!")
        return f"(?{kind}{_sequence(items)})"
    raise _UntranslatableError(name)


def _quantifier(low: int, high: int) -> str:
    if high == _sre_parse.MAXREPEAT:
        return f"{{{low},}}"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _class(members: Any) -> str:
    parts = []
    negate = ""
    for op, argument in members:
        name = op.name
        if name == "NEGATE":
            negate = "^"
        elif name == "LITERAL":
            parts.append(_char(argument))
        elif name == "RANGE":
            parts.append(f"{_char(argument[0])}-{_char(argument[1])}")
        elif name == "CATEGORY" and argument.name in _CATEGORIES:
            parts.append(_CATEGORIES[argument.name])
        else:
            raise _UntranslatableError(name)
    return f"[{negate}{''.join(parts)}]"


def _char(code: int) -> str:
    """One character, valid in and out of a ``v``-flag class: ASCII letters and digits as they are."""
    character = chr(code)
    if character.isascii() and character.isalnum():
        return character
    return f"\\u{{{code:x}}}"
