"""Portal sessions' rules (docs/console.md, "Portal sessions"): what each capability grants,
the bounds of a session's life, and which origins may frame the console.

A session is a short-lived door to one workspace's console: "read" sees the webhooks, their
deliveries and the events; "manage" may also change the webhooks. Neither ever grants the admin
API, the keys, messages or conversations, nor another portal session.
"""

from __future__ import annotations

import re
from enum import StrEnum

from dispatcher.domain.enums import Scope


class Capabilities(StrEnum):
    """What a portal session may do in its workspace."""

    MANAGE = "manage"
    READ = "read"


READ_SCOPES: frozenset[Scope] = frozenset({Scope.WEBHOOKS_READ, Scope.EVENTS_READ})
SCOPES: dict[Capabilities, frozenset[Scope]] = {
    Capabilities.READ: READ_SCOPES,
    Capabilities.MANAGE: READ_SCOPES | {Scope.WEBHOOKS_WRITE},
}

MIN_TTL_SECONDS = 60
MAX_TTL_SECONDS = 86_400
DEFAULT_TTL_SECONDS = 900
MAX_ORIGIN_LENGTH = 255

# The link's secret and the credential it is exchanged for: told apart from a key (`dk_`) by
# their prefixes.
SECRET_PREFIX = "dpl_"
TOKEN_PREFIX = "dps_"

# An origin as a browser serialises it: a scheme, a lower-case host (DNS labels, IDNs in their
# ASCII form) and an optional port; no path, query, fragment, user or trailing slash. https, or
# http on a loopback host (development).
_HOST = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
# 1..65535, exactly (so the published pattern refuses what the service refuses).
_PORT = (
    r"(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}"
    r"|[1-9][0-9]{0,3}))?"
)
_HTTPS = re.compile(rf"https://{_HOST}{_PORT}")
_LOOPBACK = re.compile(rf"http://(?:localhost|127\.0\.0\.1|\[::1\]){_PORT}")
ORIGIN_PATTERN = rf"^(https://{_HOST}|http://(localhost|127\.0\.0\.1|\[::1\])){_PORT}$"


def origin_problem(value: str) -> str | None:
    """Why `value` cannot be a parent origin, None when it can."""
    if len(value) > MAX_ORIGIN_LENGTH:
        return f"must be at most {MAX_ORIGIN_LENGTH} characters"
    if _HTTPS.fullmatch(value) or _LOOPBACK.fullmatch(value):
        port = value.rpartition(":")[2]
        if port.isdigit() and not value.endswith("]") and int(port) > 65535:
            return "must have a port of 1..65535"
        return None
    return (
        "must be an origin: https://host[:port] in lower case, without a path, query or "
        "trailing slash (http only for localhost, 127.0.0.1 or [::1])"
    )


def frame_ancestors(parent_origin: str | None) -> str:
    """The CSP `frame-ancestors` value of a session's console page."""
    return parent_origin or "'none'"


def link(base: str, session_id: str, secret: str) -> str:
    """A session's link: the console's page for the session at `base` (an origin, no trailing
    slash), the secret in the fragment (never sent to a server)."""
    return f"{base}/console/{session_id}#portal={secret}"
