"""The web console: static files served by the API process at `/console` (docs/console.md).

The files sit beside this module and ship in the package (pyproject's package data): plain ES
modules, a style sheet and one HTML page, with nothing to build at install or at run time.
They are read once, when this module is imported, and served from memory under their own
names only: no path from a request ever reaches the file system.

Every answer carries a strict Content-Security-Policy (scripts, styles and requests to this
origin only, no inline script or style, no eval, no framing) and asks Chromium to enforce
Trusted Types, so that assigning a string to `innerHTML` or the like throws instead of
rendering. The console calls the same API as any client, with the key the user signs in with;
nothing here authenticates or reads a key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from aiohttp import web

routes = web.RouteTableDef()

PREFIX = "/console"
INDEX = "index.html"

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    ]
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    # Always asked for again (the files are small): an upgrade shows at once.
    "Cache-Control": "no-cache",
}

CONTENT_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
# The names a file may have: lower-case words, one of the known extensions.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*\.(html|js|css|svg|png)")


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str


def load_files() -> dict[str, StaticFile]:
    """Every servable file of the console's folder, by name."""
    found: dict[str, StaticFile] = {}
    for entry in resources.files(__name__).iterdir():
        if entry.is_file() and _NAME.fullmatch(entry.name):
            suffix = entry.name[entry.name.rindex(".") :]
            found[entry.name] = StaticFile(entry.read_bytes(), CONTENT_TYPES[suffix])
    return found


FILES = load_files()


def _answer(file: StaticFile, headers: dict[str, str] = HEADERS) -> web.Response:
    charset = None if file.content_type == "image/png" else "utf-8"
    return web.Response(
        body=file.body, content_type=file.content_type, charset=charset, headers=headers
    )


def page(headers: dict[str, str]) -> web.Response:
    """The console's page with `headers` (a portal session's: api/portal.py)."""
    return _answer(FILES[INDEX], headers)


@routes.get(PREFIX)
async def console_root(request: web.Request) -> web.Response:
    """`/console` -> `/console/`, where the page's relative links resolve."""
    raise web.HTTPPermanentRedirect(f"{PREFIX}/", headers=HEADERS)


@routes.get(f"{PREFIX}/")
async def console_index(request: web.Request) -> web.Response:
    return _answer(FILES[INDEX])


def framed_by(origin: str) -> dict[str, str]:
    """The headers of a portal session's page that `origin` may frame (docs/console.md,
    "Portal sessions"): the policy's `frame-ancestors` names it, and X-Frame-Options (which
    cannot name an origin) is left out."""
    policy = CONTENT_SECURITY_POLICY.replace("frame-ancestors 'none'", f"frame-ancestors {origin}")
    headers = {**HEADERS, "Content-Security-Policy": policy}
    del headers["X-Frame-Options"]
    return headers


@routes.get(PREFIX + "/{name}")
async def console_file(request: web.Request) -> web.Response:
    found = FILES.get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    return _answer(found)
