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

import unicodedata

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
