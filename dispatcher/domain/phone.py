"""Phone numbers in E.164."""

from __future__ import annotations

import re

E164 = re.compile(r"^\+[1-9]\d{1,14}$")


def is_e164(value: str) -> bool:
    return E164.match(value) is not None
