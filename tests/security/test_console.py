"""The web console is safe by construction, checked on what is served and on the files
themselves: a strict Content-Security-Policy on every answer, only the console's own files
served (no path from a request reaches the file system), and no file that parses a string as
HTML or code, or carries an inline handler, script or style. (Its behaviour in a real browser:
tests/e2e/test_console_browser.py.)"""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dispatcher.api import console

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "dispatcher" / "api" / "console"
STATIC = sorted(p for p in FOLDER.iterdir() if p.is_file() and p.suffix != ".py")

# What a console file never contains: sinks that parse a string as HTML or as code, inline
# event handlers (`onclick=`, `.onerror =`), inline styles, javascript: URLs.
FORBIDDEN = {
    "innerHTML": re.compile(r"innerHTML"),
    "outerHTML": re.compile(r"outerHTML"),
    "insertAdjacentHTML": re.compile(r"insertAdjacentHTML"),
    "document.write": re.compile(r"document\.write"),
    "eval(": re.compile(r"\beval\s*\("),
    "new Function": re.compile(r"new\s+Function\b"),
    "a string timer": re.compile(r"set(Timeout|Interval)\(\s*[\"'`]"),
    "an inline handler": re.compile(r"\bon[a-z]+\s*=", re.IGNORECASE),
    "a style attribute": re.compile(r"\bstyle\s*="),
    "a javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
    "a .style property": re.compile(r"\.style\b"),
}


def test_the_policy_is_strict() -> None:
    policy = {}
    for directive in console.CONTENT_SECURITY_POLICY.split("; "):
        name, _, value = directive.partition(" ")
        policy[name] = value
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert policy["img-src"] == "'self' data:"
    assert policy["connect-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert policy["base-uri"] == "'none'"
    assert policy["form-action"] == "'self'"
    assert policy["require-trusted-types-for"] == "'script'"
    for directive in policy.values():
        assert "unsafe" not in directive and "*" not in directive


def test_the_folder_holds_the_files_served() -> None:
    names = {p.name for p in STATIC}
    assert {"index.html", "app.js", "app.css", "dom.js", "api.js"} <= names
    assert set(console.FILES) == names


@pytest.mark.parametrize("path", [p.name for p in STATIC])
async def test_every_file_is_served_with_the_policy(
    client: TestClient[Any, Any], path: str
) -> None:
    resp = await client.get(f"/console/{path}")
    assert resp.status == 200
    assert resp.headers["Content-Security-Policy"] == console.CONTENT_SECURITY_POLICY
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert resp.headers["Referrer-Policy"] == "no-referrer"
    expected = console.CONTENT_TYPES[Path(path).suffix]
    assert resp.headers["Content-Type"].split(";")[0] == expected
    assert await resp.read() == (FOLDER / path).read_bytes()


async def test_the_page_is_at_console_and_needs_no_key(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/console", allow_redirects=False)
    assert resp.status == 308
    assert resp.headers["Location"] == "/console/"
    assert resp.headers["Content-Security-Policy"] == console.CONTENT_SECURITY_POLICY
    resp = await client.get("/console/")
    assert resp.status == 200
    assert resp.headers["Content-Security-Policy"] == console.CONTENT_SECURITY_POLICY
    page = await resp.text()
    assert '<script type="module" src="app.js"></script>' in page
    assert resp.headers["Cache-Control"] == "no-cache"


@pytest.mark.parametrize(
    "path",
    [
        "/console/nothing.js",
        "/console/__init__.py",
        "/console/..%2f..%2fsettings.py",
        "/console/%2e%2e/app.py",
        "/console/../../pyproject.toml",
        "/console/APP.JS",
        "/console/app.js/",
        "/console/sub/app.js",
    ],
)
async def test_nothing_else_is_served(client: TestClient[Any, Any], path: str) -> None:
    resp = await client.get(path, allow_redirects=False)
    assert resp.status == 404, (path, await resp.text())
    assert (await resp.json())["code"] == "not_found"


async def test_a_query_string_is_refused_as_anywhere(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/console/?key=dk_x")
    assert resp.status == 400
    assert (await resp.json())["errors"][0]["path"] == "query.key"


@pytest.mark.parametrize("path", STATIC, ids=lambda p: p.name)
def test_no_file_parses_strings_as_html_or_code(path: Path) -> None:
    if path.suffix in {".png"}:
        return
    text = path.read_text()
    found = {name for name, pattern in FORBIDDEN.items() if pattern.search(text)}
    assert not found, f"{path.name}: {sorted(found)}"


def test_the_page_loads_only_its_own_files() -> None:
    page = (FOLDER / "index.html").read_text()
    # Scripts only by src (no inline script), and nothing from another origin.
    assert re.findall(r"<script[^>]*>", page) == ['<script type="module" src="app.js">']
    assert "<style" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    for module in FOLDER.glob("*.js"):
        for imported in re.findall(r"""from\s+["']([^"']+)["']""", module.read_text()):
            assert imported.startswith("./") and (FOLDER / imported).exists(), (module, imported)


def test_the_files_ship_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["dispatcher.api.console"]
    for path in STATIC:
        assert any(path.match(pattern) for pattern in patterns), path.name
    # Read as the service reads them: through importlib.resources.
    shipped = {entry.name for entry in resources.files(console.__name__).iterdir()}
    assert {p.name for p in STATIC} <= shipped


# Answers under /console that are errors: an unknown file, a path no route matches, a method
# the console does not take, a query it does not take (with a name that is markup).
CONSOLE_ERRORS = [
    ("GET", "/console/missing.js", 404),
    ("GET", "/console/a/b", 404),
    ("GET", "/console/%3Cscript%3Ealert(1)%3C%2Fscript%3E.js", 404),
    ("POST", "/console/", 405),
    ("DELETE", "/console/app.js", 405),
    ("GET", "/console/?%3Cscript%3Ealert(1)%3C%2Fscript%3E=1", 400),
    ("GET", "/console/app.js?x=1&%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E=2", 400),
]


@pytest.mark.parametrize(("method", "path", "status"), CONSOLE_ERRORS)
async def test_an_error_under_console_carries_its_headers_and_quotes_no_markup(
    client: TestClient[Any, Any], method: str, path: str, status: int
) -> None:
    resp = await client.request(method, path, allow_redirects=False)
    assert resp.status == status, await resp.text()
    for name, value in console.HEADERS.items():
        assert resp.headers.get(name) == value, name
    assert resp.content_type == "application/json"
    raw = await resp.read()
    assert b"<" not in raw and b">" not in raw, raw
    body = await resp.json()
    assert body["status"] == status
    if status == 400:
        # The name is still told, exactly, to a client that reads the JSON.
        assert any("<" in error["path"] for error in body["errors"]), body
