"""Phone numbers and blank text, as pure functions (every door uses these two)."""

from __future__ import annotations

import pytest

from dispatcher.domain.phone import is_e164
from dispatcher.domain.text import is_blank


@pytest.mark.parametrize("number", ["+15557770000", "+12", "+123456789012345", "+447700900123"])
def test_e164_accepted(number: str) -> None:
    assert is_e164(number)


@pytest.mark.parametrize(
    "number",
    [
        "+15557770000\n",  # `$` before a final newline
        "+15557770000\r",
        " +15557770000",
        "+1555777 0000",
        "+1\u0665\u0665\u0665\u0667\u0667\u0667\u0660\u0660\u0660\u0660",  # Arabic-Indic digits
        "+1\uff15\uff15\uff15\uff17\uff17\uff17\uff10\uff10\uff10\uff10",  # full-width digits
        "+1\u09eb\u09eb\u09eb7770000",  # Bengali digits
        "\uff0b15557770000",  # full-width plus
        "+05557770000",
        "+1",
        "+1234567890123456",
        "15557770000",
        "+1555777000\u200b0",
        "",
    ],
)
def test_e164_refused(number: str) -> None:
    assert not is_e164(number)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "   ",
        "\t\n\r",
        "\u200b",
        "\u200b\u200c\u200d\u2060\ufeff",
        "\u00a0\u2007\u202f\u3000",
        "\u2028\u2029",
        "\u180e",
        "\u3164",
        "\u2800",
        "\u034f",
        "\x00\x01",
        "\u202e",
    ],
)
def test_blank(text: str) -> None:
    assert is_blank(text)


@pytest.mark.parametrize("text", ["a", " a ", "\u200ba", "0", ".", "é", "😀", "\u05d0"])
def test_not_blank(text: str) -> None:
    assert not is_blank(text)
