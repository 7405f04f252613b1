"""Phone numbers in E.164, ASCII only.

Every door (API bodies and queries, inbound calls and messages, the CLI) uses `is_e164`, so a
number is one string everywhere: `+15557770000\\n` or Arabic-Indic or full-width digits are
refused instead of being stored as a second contact that looks the same.
"""

from __future__ import annotations

import re

# `fullmatch` with an explicit ASCII class: `$` would accept a final newline, `\d` would
# accept any Unicode decimal digit.
E164_PATTERN = r"\+[1-9][0-9]{1,14}"
_E164 = re.compile(E164_PATTERN)


def is_e164(value: str) -> bool:
    return _E164.fullmatch(value) is not None
