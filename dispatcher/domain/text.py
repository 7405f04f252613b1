"""Text that carries content: not only white space or invisible characters.

A message text or a name made only of spaces, line breaks, zero-width or other invisible
characters (`"   "`, `"\\u200b"`) shows as nothing in every inbox and list, so every door
refuses it. Invisible means: the Unicode categories Zs, Zl, Zp (spaces and separators), Cc
(controls) and Cf (format: zero-width space and joiners, bidi marks, the BOM), plus the
characters that render as blanks although Unicode files them as letters or symbols.

A name (a workspace's, a key's) is one line of such text: `name_problem` also refuses control
characters and line or paragraph separators, which break every list and log they show in.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable

_INVISIBLE_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf"})
# Blank-rendering characters outside those categories: combining grapheme joiner, Hangul
# fillers, Khmer inherent vowels, braille blank, Mongolian vowel separator (older Unicode).
_INVISIBLE_CHARACTERS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u180e\u2800\u3164\uffa0")
# Controls (tab, line feed, escape, DEL, C1) and line and paragraph separators.
_NOT_IN_A_NAME = frozenset({"Cc", "Zl", "Zp"})
BLANK = "must contain visible characters, not only spaces or invisible characters"


def is_invisible(char: str) -> bool:
    return char in _INVISIBLE_CHARACTERS or unicodedata.category(char) in _INVISIBLE_CATEGORIES


def is_control(char: str) -> bool:
    """A control character (Unicode Cc: C0, DEL, C1): never part of a key or an identifier."""
    return unicodedata.category(char) == "Cc"


def is_blank(value: str) -> bool:
    """True when `value` shows nothing: empty, or only white space and invisible characters."""
    return all(is_invisible(char) for char in value)


def name_problem(value: str, max_length: int) -> str | None:
    """Why `value` cannot be a name (one line of visible text, at most `max_length`
    characters), or None when it can."""
    if len(value) > max_length:
        return f"must be at most {max_length} characters"
    if is_blank(value):
        return BLANK
    if any(unicodedata.category(char) in _NOT_IN_A_NAME for char in value):
        return "must be one line without control characters (tabs, line breaks, escapes)"
    return None


# -- the same rules as JSON Schema patterns (the OpenAPI document, api/models.py) -------------
# Character classes spelled out from the predicates above, so the document cannot drift from
# them: BMP characters as `\uXXXX` escapes, others as themselves (a pattern is ECMA-262 with
# the `u` flag, or Python's `re`; both read a literal astral character as one character).


# Categories none of the classes below holds (unassigned, private, surrogates, letters, marks,
# symbols, digits): skipped at once, apart from the blank-rendering characters among them.
_IN_NO_CLASS = frozenset({"Cn", "Co", "Cs", "Lo", "Ll", "Lu", "Mn", "So", "Nd"})


@functools.cache
def _classes() -> dict[str, str]:
    """Class bodies (the inside of a `[...]`) by rule, found in one pass over every code point:
    `invisible` (`is_invisible`: `[^...]` is then one visible character), `not_in_a_name`
    (what `name_problem` refuses anywhere in a name), `control` (`is_control`),
    `unprintable` (the categories alone, without the blank-rendering letters). Built when the
    document is, not at import: the pass takes a few tenths of a second."""
    rules: dict[str, Callable[[str, str], bool]] = {
        "invisible": lambda char, category: (
            category in _INVISIBLE_CATEGORIES or char in _INVISIBLE_CHARACTERS
        ),
        "not_in_a_name": lambda _, category: category in _NOT_IN_A_NAME,
        "control": lambda _, category: category == "Cc",
        "unprintable": lambda _, category: category in _INVISIBLE_CATEGORIES,
    }
    ranges: dict[str, list[list[int]]] = {name: [] for name in rules}
    for point in range(0x110000):
        char = chr(point)
        category = unicodedata.category(char)
        if category in _IN_NO_CLASS and char not in _INVISIBLE_CHARACTERS:
            continue  # the bulk of the code space
        for name, rule in rules.items():
            if rule(char, category):
                found = ranges[name]
                if found and found[-1][1] == point - 1:
                    found[-1][1] = point
                else:
                    found.append([point, point])

    def one(point: int) -> str:
        return f"\\u{point:04x}" if point <= 0xFFFF else chr(point)

    return {
        name: "".join(one(lo) if lo == hi else f"{one(lo)}-{one(hi)}" for lo, hi in found)
        for name, found in ranges.items()
    }


def invisible_class() -> str:
    return _classes()["invisible"]


def not_in_a_name_class() -> str:
    return _classes()["not_in_a_name"]


def control_class() -> str:
    return _classes()["control"]


def unprintable_class() -> str:
    """Controls, format characters and every kind of space (Cc, Cf, Zs, Zl, Zp)."""
    return _classes()["unprintable"]


# No NUL (Postgres text cannot hold it; every JSON body is refused with one: api/framework/http.py).
NO_NUL_PATTERN = "^[^\\u0000]*$"


def visible_text_pattern(*, may_be_empty: bool = False) -> str:
    """Text that is not blank (`is_blank`) and holds no NUL; with `may_be_empty`, `""` too."""
    text = f"[^\\u0000]*[^{invisible_class()}][^\\u0000]*"
    return f"^(?:{text})?$" if may_be_empty else f"^{text}$"


def name_pattern(*, may_be_empty: bool = False) -> str:
    """What `name_problem` accepts (its length aside): one line of text, not blank."""
    line = f"[^{not_in_a_name_class()}]*"
    name = f"{line}[^{invisible_class()}]{line}"
    return f"^(?:{name})?$" if may_be_empty else f"^{name}$"


def no_control_pattern() -> str:
    """Text without control characters (`is_control`)."""
    return f"^[^{control_class()}]*$"
