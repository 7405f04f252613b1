"""What a stored response excerpt must not hold: the secrets the attempt sent.

A receiver that echoes the request's headers (many test endpoints and API gateways do) would
otherwise put the webhook's secret header values, its signature and, through a careless
receiver, its signing secret into the attempt log, which read-only keys and the console show.
An endpoint with OAuth (domain/endpoint_auth.py) adds its bearer token and its client
secret to the values hidden (engine/oauth.py passes them, engine/sender.py hides them). The
engine passes every excerpt through `redact` before it is kept (engine/sender.py, where
excerpts are made): each secret is replaced by REDACTED wherever it appears, in the forms an
echo writes it (as sent, JSON-escaped, percent-encoded), and an excerpt cut off in the middle
of one loses the cut-off beginning too (two characters or more of it).

A PEM private key (a webhook's mutual TLS `clientKey`, domain/tls.py) is never logged: the
log's last processor removes any from the text it writes (`private_keys`, dispatcher/log.py),
whatever field carries it.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

import orjson

from dispatcher.domain.signing import SECRET_PREFIX

REDACTED = "[redacted]"


def signing_values(signature: str, secrets: Iterable[str]) -> list[str]:
    """The secrets of the signature scheme, as an echo may show them: the `webhook-signature`
    header value, each of its `v1,` entries and their base64, and each `whsec_` secret with
    and without its prefix."""
    values = [signature]
    for entry in signature.split(" "):
        values.append(entry)
        values.append(entry.partition(",")[2])
    for secret in secrets:
        values.append(secret)
        values.append(secret.removeprefix(SECRET_PREFIX))
    return values


def _forms(values: Iterable[str]) -> list[str]:
    """Each value as it is, JSON-escaped (with `/` escaped too, as some encoders do) and
    percent-encoded; longest first, so that a value inside another is not replaced first."""
    forms: set[str] = set()
    for value in values:
        if not value:
            continue
        escaped = orjson.dumps(value).decode()[1:-1]
        forms.update(
            (value, escaped, escaped.replace("/", "\\/"), urllib.parse.quote(value, safe=""))
        )
    return sorted(forms, key=len, reverse=True)


def redact(text: str, values: Iterable[str], *, cut_off: bool) -> str:
    """`text` with every occurrence of each of `values` (in each of its forms) replaced by
    REDACTED. When `cut_off` (the excerpt may end before the body did), an ending that is the
    beginning of one of them is replaced too: the rest of it was only cut off."""
    forms = _forms(values)
    for form in forms:
        if form in text:
            text = text.replace(form, REDACTED)
    if cut_off:
        for form in forms:
            tail = _cut_off_start(text, form)
            if tail:
                text = text[: len(text) - tail] + REDACTED
                break
    return text


# The shortest cut-off beginning redacted. A single character would match the last character
# of one full excerpt in several (any secret's first character), for one character of a secret.
MIN_CUT_OFF = 2


def _cut_off_start(text: str, form: str) -> int:
    """The length of the longest ending of `text` that begins `form` (shorter than it, at
    least MIN_CUT_OFF long), or 0."""
    first = form[0]
    start = max(len(text) - len(form) + 1, 0)
    end = len(text) - MIN_CUT_OFF + 1
    while (found := text.find(first, start, end)) != -1:
        if form.startswith(text[found:]):
            return len(text) - found
        start = found + 1
    return 0


PEM_KEY_MARK = "PRIVATE KEY-----"
# From a BEGIN line to its END line, or to the end of a text cut off inside the key.
_PRIVATE_KEY = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.DOTALL
)


def private_keys(text: str) -> str:
    """`text` with every PEM private key replaced by REDACTED (the armor lines included)."""
    if PEM_KEY_MARK not in text:
        return text
    return _PRIVATE_KEY.sub(REDACTED, text)
