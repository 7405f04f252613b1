"""Portal sessions in headless Chromium (tests/browser.py) against a real `dispatcher serve`
process (docs/console.md, "Portal sessions"): the link opens the console signed in, the secret
leaves the address at once and works once; a read session is offered no change and refused one
by the API; an expired or deleted session is signed out at its next request; the console
framed by the session's parent origin works, and framed by another origin is refused.

The framing pages are served by this test on other loopback ports (other origins). Each browser
step runs in a thread (`step`), so that this test's event loop keeps serving them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web
from selenium.webdriver.common.by import By

from dispatcher.store.database import Database
from tests.browser import Browser
from tests.processes import free_port, read_until, start, stop, until_ready

T = TypeVar("T")
HOOK = {"url": "http://127.0.0.1:9/portal", "events": ["contact.updated"], "name": "Billing"}


async def step(action: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(action, *args)


@dataclass
class Service:
    base: str
    key: str
    http: aiohttp.ClientSession
    secrets: list[str]

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.key}"}
        async with self.http.request(method, self.base + path, headers=headers, **kwargs) as r:
            assert r.status < 300, (method, path, r.status, await r.text())
            return None if r.status == 204 else await r.json()

    async def portal(self, capabilities: str, **body: Any) -> dict[str, Any]:
        made: dict[str, Any] = await self.call(
            "POST", "/v1/portal-sessions", json={"capabilities": capabilities, **body}
        )
        self.secrets.append(urlsplit(made["url"]).fragment.removeprefix("portal="))
        return made


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[Service]:
    port = free_port()
    proc = await start(database_url, "serve", "--port", str(port), DISPATCHER_LOG_LEVEL="info")
    made = Service("", "", aiohttp.ClientSession(), [])
    try:
        assert proc.stdout is not None
        made.key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        made.base = f"http://127.0.0.1:{port}"
        await until_ready(made.http, made.base)
        yield made
    finally:
        await made.http.close()
        code, err = await stop(proc)
    assert code == 0, err
    # The links' secrets went through the browser only: never into the server's log.
    assert made.secrets and not [s for s in made.secrets if s in err]


@pytest.fixture
async def framing() -> AsyncIterator[Callable[[str], str]]:
    """Two pages that frame a given console link, each on an origin of its own:
    `framing(url)` answers the page's address; its origin is `http://127.0.0.1:<port>`."""
    runners: list[web.AppRunner] = []
    frames: dict[str, str] = {}

    async def page(request: web.Request) -> web.Response:
        src = frames[request.match_info["name"]]
        html = (
            "<!doctype html><title>parent</title>"
            f'<iframe id="portal" width="1000" height="700" src="{src}"></iframe>'
            "<script>document.getElementById('portal').addEventListener('load',"
            " () => { window.frameLoaded = true; });</script>"
        )
        return web.Response(text=html, content_type="text/html")

    async def serve() -> str:
        app = web.Application()
        app.router.add_get("/{name}", page)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return f"http://127.0.0.1:{port}"

    origins = [await serve(), await serve()]

    def frame(url: str, *, origin: int = 0) -> str:
        name = f"p{len(frames)}"
        frames[name] = url
        return f"{origins[origin]}/{name}"

    frame.origins = origins  # type: ignore[attr-defined]
    try:
        yield frame
    finally:
        for runner in runners:
            await runner.cleanup()


# -- the browser's steps (each runs in a thread) ---------------------------------------------


def open_link(browser: Browser, url: str, hook_id: str) -> None:
    """Open the link: signed in, the webhook listed, and the secret gone from the address."""
    browser.driver.get(url)
    browser.wait(lambda d: d.find_elements(By.ID, "sign-out"), "signed in")
    browser.wait(
        lambda d: d.find_elements(By.CSS_SELECTOR, f'[data-webhook="{hook_id}"]'), "the webhook"
    )
    browser.shot("portal-webhooks")
    current = browser.driver.current_url
    assert "portal=" not in current and urlsplit(current).path == urlsplit(url).path
    assert browser.driver.get_cookies() == []


def ended(browser: Browser) -> None:
    """The session's end shown: no key form, no console."""
    browser.wait(lambda d: d.find_elements(By.ID, "portal-ended"), "the session ended")
    driver = browser.driver
    assert driver.find_elements(By.ID, "api-key") == []
    assert driver.find_elements(By.ID, "sign-out") == []
    browser.shot("portal-ended")


def no_console_error(browser: Browser) -> None:
    for entry in browser.log():
        assert "Content Security Policy" not in entry["message"], entry
        assert "Uncaught" not in entry["message"], entry


def post_from_the_page(browser: Browser, path: str, body: dict[str, Any]) -> int:
    """The request a write button would send, made by the page with its credential."""
    status: int = browser.driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch(arguments[0], {method: "POST", body: JSON.stringify(arguments[1]), headers: {
            "Content-Type": "application/json",
            Authorization: "Bearer " + sessionStorage.getItem("dispatcher.console.key")}})
          .then((r) => done(r.status), () => done(0));
        """,
        path,
        body,
    )
    return status


def go_to(browser: Browser, route: str) -> None:
    """Follow an address inside the console (no reload): the page makes its next request."""
    browser.driver.execute_script("location.hash = arguments[0]", route)


async def test_a_manage_link_opens_the_console_once(browser: Browser, service: Service) -> None:
    hook = await service.call("POST", "/v1/webhooks", json=HOOK)
    made = await service.portal("manage")
    await step(open_link, browser, made["url"], hook["id"])
    driver = browser.driver
    assert driver.find_elements(By.LINK_TEXT, "Create a webhook")
    assert driver.find_elements(By.CSS_SELECTOR, ".badge-readonly") == []
    # Only what the session may see: no conversations.
    sections = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#nav a")]
    assert sections == ["Webhooks", "Events", "Event types"]
    await step(no_console_error, browser)
    # The same link again: its secret was exchanged already.
    await step(driver.get, made["url"])
    await step(ended, browser)


async def test_a_read_link_is_offered_no_change_and_refused_one(
    browser: Browser, service: Service
) -> None:
    hook = await service.call("POST", "/v1/webhooks", json=HOOK)
    made = await service.portal("read")
    await step(open_link, browser, made["url"], hook["id"])
    driver = browser.driver
    badge = browser.wait(lambda d: d.find_element(By.CSS_SELECTOR, ".badge-readonly"), "badge")
    assert badge.text == "read-only"
    assert driver.find_elements(By.LINK_TEXT, "Create a webhook") == []
    await step(go_to, browser, f"#/webhooks/{hook['id']}")
    await step(lambda: browser.wait(lambda d: d.find_elements(By.ID, "settings-title"), "page"))
    main = driver.find_element(By.TAG_NAME, "main").text
    for caption in ("Send a test", "Disable", "Rotate the secret", "Recover", "Edit"):
        assert caption not in main, caption
    assert await step(post_from_the_page, browser, "/v1/webhooks", HOOK) == 403
    status = await step(post_from_the_page, browser, f"/v1/webhooks/{hook['id']}/test", {})
    assert status == 403
    hooks = await service.call("GET", "/v1/webhooks")
    assert [h["name"] for h in hooks["data"]].count("Billing") == 1


async def test_an_expired_link_opens_nothing_and_an_expired_session_is_signed_out(
    browser: Browser, service: Service, database_url: str
) -> None:
    hook = await service.call("POST", "/v1/webhooks", json=HOOK)
    used, unused = await service.portal("read", ttlSeconds=60), await service.portal("read")
    await step(open_link, browser, used["url"], hook["id"])
    # Their time passes (the process reads the real clock: the rows' end is moved instead).
    db = await Database.open(database_url, min_size=1, max_size=1)
    try:
        async with db.acquire() as conn:
            await conn.execute(
                "UPDATE portal_sessions SET expires_at = now() - interval '1 second'"
                " WHERE id = ANY($1::text[])",
                [used["id"], unused["id"]],
            )
    finally:
        await db.close()
    await step(go_to, browser, "#/events")
    await step(ended, browser)
    await step(browser.driver.get, unused["url"])
    await step(ended, browser)


async def test_a_deleted_session_is_signed_out_at_its_next_request(
    browser: Browser, service: Service
) -> None:
    hook = await service.call("POST", "/v1/webhooks", json=HOOK)
    made = await service.portal("manage")
    await step(open_link, browser, made["url"], hook["id"])
    await service.call("DELETE", f"/v1/portal-sessions/{made['id']}")
    await step(go_to, browser, "#/events")
    await step(ended, browser)
    # A reload keeps it out too.
    await step(browser.driver.refresh)
    await step(ended, browser)


def framed(browser: Browser, page: str) -> None:
    """Open the parent page; wait for its frame to load (or fail to), then enter it."""
    browser.driver.get(page)
    browser.wait(lambda d: d.execute_script("return window.frameLoaded === true"), "the frame")
    browser.driver.switch_to.frame(browser.driver.find_element(By.ID, "portal"))


def refused_frame(browser: Browser) -> str:
    """What the refused frame holds: the browser's error page, none of the console."""
    driver = browser.driver
    assert driver.find_elements(By.ID, "view") == []
    assert driver.find_elements(By.ID, "sign-out") == []
    href: str = driver.execute_script("return location.href")
    driver.switch_to.default_content()
    browser.shot("refused-frame")
    return href


async def test_the_console_is_framed_by_the_parent_origin_only(
    browser: Browser, service: Service, framing: Any
) -> None:
    hook = await service.call("POST", "/v1/webhooks", json=HOOK)
    allowed, other = framing.origins
    made = await service.portal("manage", parentOrigin=allowed)
    await step(framed, browser, framing(made["url"]))
    await step(open_in_frame, browser, hook["id"])
    browser.driver.switch_to.default_content()
    browser.shot("framed-by-the-parent")

    # Another origin frames a live session's link: refused by the browser (frame-ancestors).
    second = await service.portal("manage", parentOrigin=allowed)
    await step(framed, browser, framing(second["url"], origin=1))
    assert await step(refused_frame, browser) != second["url"]
    assert any("frame-ancestors" in entry["message"] for entry in browser.log())
    # A session without a parent origin may be framed by nobody.
    unframed = await service.portal("manage")
    await step(framed, browser, framing(unframed["url"]))
    await step(refused_frame, browser)
    # Neither refused link was used: each still opens on its own.
    await step(open_link, browser, second["url"], hook["id"])
    assert other != allowed


def open_in_frame(browser: Browser, hook_id: str) -> None:
    browser.wait(lambda d: d.find_elements(By.ID, "sign-out"), "signed in, in the frame")
    browser.wait(
        lambda d: d.find_elements(By.CSS_SELECTOR, f'[data-webhook="{hook_id}"]'), "the webhook"
    )
    assert "portal=" not in browser.driver.execute_script("return location.href")
