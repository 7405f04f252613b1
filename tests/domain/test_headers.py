"""Custom header rules as pure functions: every hostile input a client (or a stored row that
skipped the API) could bring, and the field each problem is reported on.

The API refuses exactly these (naming `headers` or `secretHeaders`), and the sender never
writes a header that breaks them; no message ever quotes a value.
"""

from __future__ import annotations

import pytest

from dispatcher.domain.headers import (
    HEADERS,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    SECRET_HEADERS,
    HeaderProblem,
    header_problem,
    header_problems,
    names_in_order,
)

ACCEPTED_NAMES = [
    "X-Api-Key",
    "Authorization",
    "x",
    "X_Under_Score",
    "!#$%&'*+-.^_`|~09AZaz",
    "Accept",  # not reserved: a custom Accept replaces ours
    "Webhook",  # only `webhook-…` is reserved
    "X-Webhook-Id",
    "Hostname",
    "Content-Types",
    "Connection-Id",
]

ACCEPTED_VALUES = [
    "",
    "Bearer abc.def",
    "a\tb",  # tab inside
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "x" * 4000,
]

# name -> a word the message must contain
REFUSED_NAMES = {
    "": "empty",
    "X Api": "token",  # space in a name
    " X-Api": "token",
    "X-Api ": "token",
    "X-Api:": "token",  # a colon would end the name early
    "X:Y": "token",
    "X-Api\r\nX-Injected": "token",  # CRLF injection through a name
    "X\nY": "token",
    "X\x00Y": "token",
    "X\tY": "token",
    "X(Y)": "token",
    'X"Y': "token",
    "X/Y": "token",
    "X@Y": "token",
    "X[Y]": "token",
    "X{Y}": "token",
    "X=Y": "token",
    "X,Y": "token",
    "X;Y": "token",
    "X?Y": "token",
    "X\\Y": "token",
    "\u0425-Api": "token",  # Cyrillic Ha, a lookalike of X
    "\uff38-Api": "token",  # fullwidth X
    "X\u2010Api": "token",  # Unicode hyphen
    "X\u200bApi": "token",  # zero-width space
    "X-\u00c4pi": "token",
    "webhook\u2010id": "token",  # a lookalike of a reserved name is still not a token
    "X\x7fY": "token",
    # reserved, in any case
    "webhook-id": "reserved",
    "Webhook-Id": "reserved",
    "WEBHOOK-TIMESTAMP": "reserved",
    "webhook-signature": "reserved",
    "webhook-anything": "reserved",
    "Webhook-": "reserved",
    "Content-Type": "reserved",
    "content-length": "reserved",
    "Host": "reserved",
    "HOST": "reserved",
    "Transfer-Encoding": "reserved",
    "Connection": "reserved",
    "User-Agent": "reserved",
}

# value -> a word the message must contain
REFUSED_VALUES = {
    "a\r\nX-Injected: 1": "CR, LF",  # CRLF injection
    "a\rb": "CR, LF",
    "a\nb": "CR, LF",
    "\r\n": "CR, LF",
    "a\x00b": "NUL",
    "a\x01b": "controls",
    "a\x1bb": "controls",
    "a\x7fb": "controls",
    "caf\u00e9": "ASCII",
    "\u200b": "ASCII",  # zero-width space
    "a\u00a0b": "ASCII",  # no-break space
    "\uff21": "ASCII",  # fullwidth A
    "a\u2028b": "ASCII",  # line separator
    " leading": "start or end",
    "trailing ": "start or end",
    "\tleading-tab": "start or end",
    "trailing-tab\t": "start or end",
    " ": "start or end",
}


@pytest.mark.parametrize("name", ACCEPTED_NAMES)
@pytest.mark.parametrize("value", ACCEPTED_VALUES, ids=lambda v: repr(v[:20]))
def test_accepted(name: str, value: str) -> None:
    assert header_problem(name, value) is None
    assert header_problems({name: value}, {}) == []
    assert header_problems({}, {name: value}) == []


@pytest.mark.parametrize(("name", "word"), REFUSED_NAMES.items(), ids=repr)
def test_refused_names(name: str, word: str) -> None:
    problem = header_problem(name, "fine")
    assert problem is not None and word in problem, problem
    for field, given in ((HEADERS, ({name: "fine"}, {})), (SECRET_HEADERS, ({}, {name: "fine"}))):
        (found,) = header_problems(*given)
        assert found == HeaderProblem(field, problem)


@pytest.mark.parametrize(("value", "word"), REFUSED_VALUES.items(), ids=repr)
def test_refused_values_never_quote_the_value(value: str, word: str) -> None:
    problem = header_problem("X-Secret", value)
    assert problem is not None and word in problem, problem
    assert "X-Secret" in problem
    if value.strip():
        assert value.strip() not in problem
    (found,) = header_problems({}, {"X-Secret": value})
    assert found.field == SECRET_HEADERS


def test_a_lookalike_name_is_shown_escaped() -> None:
    problem = header_problem("\u0425-Api", "v")
    assert problem is not None and "\\u0425-Api" in problem


@pytest.mark.parametrize(
    ("headers", "secret_headers", "changed", "fields"),
    [
        # the same name, in different case, across both objects
        ({"X-Key": "1"}, {"x-key": "2"}, {HEADERS, SECRET_HEADERS}, [HEADERS, SECRET_HEADERS]),
        # a PATCH of one object is blamed for a clash with the stored other
        ({"X-Key": "1"}, {"x-key": "2"}, {HEADERS}, [HEADERS]),
        ({"X-Key": "1"}, {"X-KEY": "2"}, {SECRET_HEADERS}, [SECRET_HEADERS]),
        # the very same name in both
        ({"X-Key": "1"}, {"X-Key": "1"}, {HEADERS, SECRET_HEADERS}, [HEADERS, SECRET_HEADERS]),
        # within one object
        ({"X-Key": "1", "x-KEY": "2"}, {}, {HEADERS}, [HEADERS]),
        ({}, {"Authorization": "a", "authorization": "b"}, {HEADERS}, [SECRET_HEADERS]),
    ],
)
def test_names_are_compared_case_insensitively_across_both(
    headers: dict[str, str], secret_headers: dict[str, str], changed: set[str], fields: list[str]
) -> None:
    problems = header_problems(headers, secret_headers, changed=changed)
    assert [p.field for p in problems] == fields
    assert all("case-insensitively" in p.message for p in problems)


def many(n: int, prefix: str = "X-H") -> dict[str, str]:
    return {f"{prefix}{i}": "v" for i in range(n)}


@pytest.mark.parametrize(
    ("headers", "secret_headers", "changed", "fields"),
    [
        (many(MAX_HEADERS), {}, {HEADERS}, []),
        (many(MAX_HEADERS + 1), {}, {HEADERS}, [HEADERS]),
        ({}, many(MAX_HEADERS + 1), {SECRET_HEADERS}, [SECRET_HEADERS]),
        # 21 across both: blamed on those the request changes, else on both
        (many(10), many(11, "X-S"), {HEADERS, SECRET_HEADERS}, [HEADERS, SECRET_HEADERS]),
        (many(10), many(11, "X-S"), {SECRET_HEADERS}, [SECRET_HEADERS]),
        (many(10), many(11, "X-S"), set(), [HEADERS, SECRET_HEADERS]),
        (many(21), {}, {SECRET_HEADERS}, [HEADERS]),  # only headers has any
    ],
)
def test_at_most_twenty_headers_across_both(
    headers: dict[str, str], secret_headers: dict[str, str], changed: set[str], fields: list[str]
) -> None:
    problems = header_problems(headers, secret_headers, changed=changed)
    assert [p.field for p in problems] == fields
    assert all(f"at most {MAX_HEADERS} headers" in p.message for p in problems)


def sized(total: int, name: str = "X-Big") -> dict[str, str]:
    return {name: "v" * (total - len(name))}


@pytest.mark.parametrize(
    ("headers", "secret_headers", "fields"),
    [
        (sized(MAX_HEADER_BYTES), {}, []),
        (sized(MAX_HEADER_BYTES + 1), {}, [HEADERS]),
        ({}, sized(MAX_HEADER_BYTES + 1), [SECRET_HEADERS]),
        (sized(2048), sized(2048, "X-Other"), []),
        (sized(2048), sized(2049, "X-Other"), [HEADERS, SECRET_HEADERS]),
        # names count too, value empty
        ({"X" * MAX_HEADER_BYTES: ""}, {}, []),
        ({"X" * (MAX_HEADER_BYTES + 1): ""}, {}, [HEADERS]),
    ],
)
def test_at_most_4_kib_of_names_and_values_across_both(
    headers: dict[str, str], secret_headers: dict[str, str], fields: list[str]
) -> None:
    problems = header_problems(headers, secret_headers)
    assert [p.field for p in problems] == fields
    assert all(f"at most {MAX_HEADER_BYTES} bytes" in p.message for p in problems)
    assert all("vvvv" not in p.message for p in problems)


def test_size_counts_utf8_bytes_of_what_is_refused_anyway() -> None:
    """A non-ASCII value is refused for its characters; its UTF-8 bytes still count toward
    the size, so the size problem is reported beside it, not missed."""
    problems = header_problems({"X-A": "\u00e9" * 2100}, {})
    assert [p.field for p in problems] == [HEADERS, HEADERS]
    assert "ASCII" in problems[0].message and "bytes" in problems[1].message


def test_every_problem_is_reported() -> None:
    problems = header_problems(
        {"Host": "h", "X-A": "a\r\n", "": "x", "X-Dup": "1"},
        {"x-dup": "2", "X-Ok": " padded"},
    )
    assert [p.field for p in problems] == [HEADERS, HEADERS, HEADERS, HEADERS, SECRET_HEADERS,
                                           SECRET_HEADERS]  # fmt: skip
    assert "reserved" in problems[0].message and "CR, LF" in problems[1].message
    assert "empty" in problems[2].message and "case-insensitively" in problems[3].message
    assert "start or end" in problems[5].message


def test_secret_header_names_sort_case_insensitively() -> None:
    assert names_in_order(["b", "A", "C", "a-b"]) == ["A", "a-b", "b", "C"]
    assert names_in_order([]) == []
