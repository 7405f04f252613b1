"""A subscription's custom headers (`headers`, `secretHeaders`): the one set of rules.

Used twice, so that what the API accepted is exactly what the sender writes: by the API on
create and PATCH (a 400 naming the field, nothing changed), and by the sender before it
writes a header line (a stored header that breaks a rule, stored before the rule existed or
past the API, is never written: the attempt fails and is recorded, like a URL that cannot be
attempted).

The rules (docs/webhooks.md, "Custom headers"):

- A name is an HTTP token (RFC 9110 `tchar`: ASCII letters, digits and ``!#$%&'*+-.^_`|~``),
  compared case-insensitively: no two names equal across both objects.
- A value is visible ASCII, space and tab, and neither starts nor ends with a space or tab:
  an HTTP parser strips that white space (RFC 9110, 5.5), so the receiver would see another
  value than the one stored. A value may be empty.
- Names reserved by the protocol or by us are refused: those in RESERVED, and any starting
  `webhook-` (Standard Webhooks' namespace).
- At most MAX_HEADERS headers and MAX_HEADER_BYTES bytes (names plus values, UTF-8) across
  both objects.

Messages are plain words for the API's 400 and the attempt's `lastError`. They may name a
header (as `ascii()` spells it, so a lookalike or an invisible character shows) but never
quote a value: a secret header's value must not reach an answer or a log.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

HEADERS = "headers"
SECRET_HEADERS = "secretHeaders"
FIELDS = (HEADERS, SECRET_HEADERS)

MAX_HEADERS = 20
MAX_HEADER_BYTES = 4096
RESERVED = frozenset(
    {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "content-type",
        "content-length",
        "host",
        "transfer-encoding",
        "connection",
        "user-agent",
    }
)
RESERVED_PREFIX = "webhook-"

# RFC 9110 5.6.2: token = 1*tchar. ASCII only: `re` classes spelled out, no \w.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 9110 5.5 field-value, narrowed to visible ASCII, space and tab (no obs-text).
_VALUE = re.compile(r"[\t\x20-\x7e]*")
_EDGE_WHITESPACE = (" ", "\t")

VALUE_RULE = "must contain only visible ASCII characters, spaces and tabs"


class HeaderProblem(NamedTuple):
    """What is wrong, and which field (`headers` or `secretHeaders`) says it."""

    field: str
    message: str


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a custom header's name, or None."""
    if not name:
        return "a header name must not be empty"
    if not _TOKEN.fullmatch(name):
        return (
            f"header name {name!a} is not an HTTP token: use ASCII letters, digits and "
            "!#$%&'*+-.^_`|~ only (no spaces, colons or other characters)"
        )
    folded = name.lower()
    if folded in RESERVED or folded.startswith(RESERVED_PREFIX):
        return f"header {name} is reserved (set by the service on every request)"
    return None


def value_problem(name: str, value: str) -> str | None:
    """Why `value` cannot be the value of header `name`, or None. Never quotes the value."""
    if not _VALUE.fullmatch(value):
        return f"the value of header {name!a} {VALUE_RULE} (no CR, LF, NUL or controls)"
    if value.startswith(_EDGE_WHITESPACE) or value.endswith(_EDGE_WHITESPACE):
        return f"the value of header {name!a} must not start or end with a space or tab"
    return None


def header_problem(name: str, value: str) -> str | None:
    """Why the header `name: value` must not be written, or None (the sender's check)."""
    return name_problem(name) or value_problem(name, value)


def _blame(involved: Collection[str], changed: Collection[str]) -> list[str]:
    """The fields a problem of both objects is reported on: those of them the request
    changes (what the client can fix), else all of them."""
    return [f for f in FIELDS if f in involved and f in changed] or [
        f for f in FIELDS if f in involved
    ]


def header_problems(
    headers: Mapping[str, str],
    secret_headers: Mapping[str, str],
    *,
    changed: Collection[str] = FIELDS,
) -> list[HeaderProblem]:
    """Everything wrong with a subscription's custom headers, as they would be stored.

    `changed` are the fields the request gives (a PATCH may give one, the other being the
    stored one): problems that come from both objects together (a name in both, the count,
    the size) are reported on those.
    """
    problems: list[HeaderProblem] = []
    first_seen: dict[str, tuple[str, str]] = {}  # folded name -> (field, name as given)
    count = size = 0
    for field, given in ((HEADERS, headers), (SECRET_HEADERS, secret_headers)):
        for name, value in given.items():
            count += 1
            size += len(name.encode("utf-8", "surrogatepass"))
            size += len(value.encode("utf-8", "surrogatepass"))
            problem = header_problem(name, value)
            if problem is not None:
                problems.append(HeaderProblem(field, problem))
                continue
            folded = name.lower()
            seen = first_seen.setdefault(folded, (field, name))
            if seen != (field, name):
                message = (
                    f"header {name} repeats {seen[1]} (names are compared case-insensitively, "
                    f"across {HEADERS} and {SECRET_HEADERS})"
                )
                problems += [HeaderProblem(f, message) for f in _blame({field, seen[0]}, changed)]
    used = {f for f, given in ((HEADERS, headers), (SECRET_HEADERS, secret_headers)) if given}
    if count > MAX_HEADERS:
        message = f"at most {MAX_HEADERS} headers across {HEADERS} and {SECRET_HEADERS} ({count})"
        problems += [HeaderProblem(f, message) for f in _blame(used, changed)]
    if size > MAX_HEADER_BYTES:
        message = (
            f"at most {MAX_HEADER_BYTES} bytes of names and values across {HEADERS} and "
            f"{SECRET_HEADERS} ({size})"
        )
        problems += [HeaderProblem(f, message) for f in _blame(used, changed)]
    return problems


def names_in_order(names: Iterable[str]) -> list[str]:
    """Header names as given, sorted case-insensitively (`secretHeaderNames`)."""
    return sorted(names, key=lambda name: (name.lower(), name))


def _any_case(text: str) -> str:
    """`text` (letters and hyphens) as a pattern matching it in any letter case (ECMA-262 has
    no inline `(?i)`)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in text)


# The rules of `name_problem` and `value_problem` as JSON Schema patterns (the OpenAPI
# document): an HTTP token that is not reserved; visible ASCII, spaces and tabs, not at an edge.
_RESERVED_NAMES = "|".join(_any_case(name) for name in sorted(RESERVED))
NAME_PATTERN = f"^(?!{_any_case(RESERVED_PREFIX)})(?!(?:{_RESERVED_NAMES})$){_TOKEN.pattern}$"
VALUE_PATTERN = r"^(?:[\x21-\x7e](?:[\t\x20-\x7e]*[\x21-\x7e])?)?$"
