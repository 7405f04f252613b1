"""The console as a support person uses it, in headless Chromium (tests/browser.py) against a
real `dispatcher serve` process and a real receiver on loopback: sign in, find a failing
delivery, fix the receiver, click Retry, see it delivered with its attempts; an event's hostile
data shown as text and never run; a read-only key offered no Retry, and refused by the API; a
webhook's OAuth auth shown and edited, never its client secret.

Each browser step runs in a thread (`step`): the receiver answers on this test's event loop,
which must keep turning while the browser waits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from dispatcher.domain.catalog import CATALOG
from dispatcher.store import workspaces
from dispatcher.store.database import Database
from tests.browser import PHONE, Browser
from tests.conftest import wait_for
from tests.processes import free_port, read_until, start, stop, until_ready
from tests.receiver import Receiver, answer
from tests.tls_certificates import Authority

T = TypeVar("T")

RECEIVER_DOWN = b'{"error": "database is down"}'
# What an attacker would put in a contact's name: shown as these characters, never run.
HOSTILE = {
    "id": "CT1",
    "name": "<img src=x onerror=alert(1)>",
    "note": '<img src=x onerror="window.__pwned = 1">',
    "bio": "<script>window.__pwned = 2</script>",
}


async def step(action: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(action, *args)


@dataclass
class Service:
    """A `dispatcher serve` process on a free port, with its demo workspace's key."""

    base: str
    key: str
    http: aiohttp.ClientSession

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def call(self, method: str, path: str, key: str | None = None, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        async with self.http.request(method, self.base + path, headers=headers, **kwargs) as r:
            assert r.status < 300, (method, path, r.status, await r.text())
            return await r.json()

    async def status_of(self, method: str, path: str, key: str) -> int:
        headers = {"Authorization": f"Bearer {key}"}
        async with self.http.request(method, self.base + path, headers=headers) as r:
            return r.status


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[Service]:
    port = free_port()
    # No retry on the schedule within the test (an hour away): the delivery is retried when
    # the test clicks Retry, and not before.
    proc = await start(database_url, "serve", "--port", str(port),
                       DISPATCHER_RETRY_SCHEDULE="3600", DISPATCHER_LOG_LEVEL="info")  # fmt: skip
    key = ""
    try:
        assert proc.stdout is not None
        key = await read_until(proc.stdout, r"API key: (dk_\S+)")
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            await until_ready(http, base)
            yield Service(base, key, http)
    finally:
        code, err = await stop(proc)
    assert code == 0, err
    # The key the console signed in with went through every request: never into a log.
    assert key not in err


async def failing_delivery(service: Service, receiver: Receiver) -> tuple[str, str]:
    """A webhook to the receiver, which answers 500, and one delivery attempted once."""
    receiver.behaviours["/hook"] = answer(500, body=RECEIVER_DOWN)
    hook = await service.call(
        "POST", "/v1/webhooks", json={"url": receiver.url("/hook"), "events": ["contact.updated"],
                                      "name": "Billing"},
    )  # fmt: skip
    await service.call("POST", "/v1/events", json={"type": "contact.updated", "data": {"id": "C1"}})
    found: dict[str, Any] = {}

    async def attempted() -> bool:
        page = await service.call("GET", f"/v1/webhooks/{hook['id']}/deliveries")
        found.update(page["data"][0] if page["data"] else {})
        return bool(found.get("attempts"))

    await wait_for(attempted, message="the first attempt recorded")
    assert found["status"] == "pending" and found["lastError"] == "HTTP 500"
    return hook["id"], found["id"]


# -- the browser's steps (each runs in a thread) ---------------------------------------------


def sign_in(browser: Browser, key: str) -> None:
    """From the keyboard: type the key, press Enter."""
    browser.open()
    field = browser.wait(lambda d: d.find_element(By.ID, "api-key"), "the sign-in form")
    browser.shot("sign-in")
    field.send_keys(key, Keys.ENTER)
    browser.wait(lambda d: d.find_elements(By.ID, "sign-out"), "signed in")
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".cards"), "the webhooks")
    browser.shot("webhooks")


def text_of(driver: WebDriver, selector: str) -> str:
    """Every text under the elements `selector` finds, shown or folded away."""
    return " ".join(
        element.get_attribute("textContent") or ""
        for element in driver.find_elements(By.CSS_SELECTOR, selector)
    )


def fact(driver: WebDriver, name: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, f'[data-fact="{name}"]')
    return found[0].text if found else ""


def attempts_listed(driver: WebDriver) -> list[str]:
    """The text of each attempt in the timeline, newest first."""
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".timeline li.attempt")]


def when_listed(browser: Browser, count: int) -> list[str]:
    """The attempts' texts once `count` are listed (read as one, while the page refreshes)."""
    return browser.wait(
        lambda d: listed if len(listed := attempts_listed(d)) == count else None,
        f"{count} attempt(s) listed",
    )


def open_the_failing_delivery(browser: Browser, hook_id: str) -> None:
    """From the webhooks page, by links: the webhook's deliveries, then the failing one."""
    card = browser.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, f'[data-webhook="{hook_id}"]'), "the webhook"
    )
    browser.wait(lambda d: "HTTP error 1" in card.text, "the failed attempt in the chart")
    assert "0.0%" in card.text  # its success rate
    card.find_element(By.LINK_TEXT, "Deliveries").click()
    row = browser.wait(
        lambda d: next(
            (r for r in d.find_elements(By.CSS_SELECTOR, "tbody tr") if "HTTP 500" in r.text),
            None,
        ),
        "the failing delivery listed",
    )
    assert "pending" in row.text and "contact.updated" in row.text
    browser.shot("deliveries")
    row.find_element(By.LINK_TEXT, "Open").click()
    (attempt,) = when_listed(browser, 1)
    assert "Attempt 1" in attempt and "http error" in attempt
    browser.wait(lambda d: "HTTP 500" in fact(d, "last error"), "the last error")
    # The receiver's answer, as it came back (folded in the timeline).
    browser.wait(lambda d: RECEIVER_DOWN.decode() in text_of(d, ".timeline .excerpt"), "the answer")
    browser.shot("failing-delivery")


def retry_and_see_it_delivered(browser: Browser) -> None:
    browser.driver.find_element(By.ID, "retry").click()
    browser.wait(lambda d: fact(d, "status") == "delivered", "the delivery delivered")
    newest, first = when_listed(browser, 2)
    assert "Attempt 2" in newest and "success" in newest and "manual retry" in newest
    assert "Attempt 1" in first and "http error" in first
    browser.wait(lambda d: fact(d, "last error") == "—", "no last error")
    browser.shot("delivered")


def sign_out(browser: Browser, key: str) -> None:
    driver = browser.driver
    # The key is in this tab's session storage only: not in the address, not in a cookie.
    assert key not in driver.current_url
    assert driver.get_cookies() == []
    assert driver.execute_script("return sessionStorage.length") == 1
    driver.find_element(By.ID, "sign-out").click()
    browser.wait(lambda d: d.find_elements(By.ID, "api-key"), "the sign-in form again")
    assert driver.execute_script("return sessionStorage.length") == 0
    for entry in browser.log():
        # No script refused by the policy, no error thrown by the console's own code.
        assert "Content Security Policy" not in entry["message"], entry
        assert "Uncaught" not in entry["message"], entry


async def test_sign_in_see_a_failure_fix_the_receiver_retry_and_see_it_delivered(
    browser: Browser, service: Service, receiver: Receiver
) -> None:
    browser.base = service.base
    hook_id, _ = await failing_delivery(service, receiver)
    await step(sign_in, browser, service.key)
    await step(open_the_failing_delivery, browser, hook_id)
    receiver.behaviours.pop("/hook")  # fixed: the receiver answers 200 from now on
    await step(retry_and_see_it_delivered, browser)
    assert len(receiver.at("/hook")) == 2
    await step(sign_out, browser, service.key)


# -- hostile data ----------------------------------------------------------------------------


def nothing_ran(browser: Browser) -> None:
    assert browser.alert_text() is None
    assert browser.driver.execute_script("return typeof window.__pwned") == "undefined"
    # Shown as text: the page holds no element the data could have made.
    assert browser.driver.find_elements(By.CSS_SELECTOR, "main img, main script") == []


def see_the_event_as_text(browser: Browser, event_id: str) -> None:
    browser.open("#/events")
    link = browser.wait(lambda d: d.find_element(By.LINK_TEXT, event_id), "the event listed")
    row = link.find_element(By.XPATH, "./ancestor::tr")
    assert "<img src=x onerror=alert(1)>" in row.text  # the data's excerpt
    nothing_ran(browser)
    link.click()
    envelope = browser.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, "pre.json"), "the event's envelope"
    )
    for value in HOSTILE.values():
        # As JSON text: the quotes in a value are escaped, the angle brackets are not.
        assert value.replace('"', '\\"') in envelope.text, value
    browser.shot("hostile-event")
    nothing_ran(browser)


def see_the_payload_as_text(browser: Browser) -> None:
    """Through "where it went": the delivery, its payload pretty-printed, as text."""
    browser.driver.find_element(By.CSS_SELECTOR, "section a[href*='/deliveries/']").click()
    payload = browser.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, "pre.json[aria-label='Payload']"), "the payload"
    )
    assert '"name": "<img src=x onerror=alert(1)>"' in payload.text
    browser.shot("hostile-payload")
    nothing_ran(browser)


def readable_at_phone_width(browser: Browser) -> None:
    browser.viewport(*PHONE, mobile=True)
    for route in ("#/events", "#/webhooks"):
        browser.open(route)
        browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "main table, main .cards"), route)
        assert browser.fits_its_width(), route
        browser.shot(f"phone-{route[2:]}")
    nothing_ran(browser)


async def test_hostile_event_data_is_shown_as_text_and_runs_nothing(
    browser: Browser, service: Service, receiver: Receiver
) -> None:
    browser.base = service.base
    await service.call(
        "POST", "/v1/webhooks", json={"url": receiver.url("/hook"), "events": ["contact.updated"]}
    )
    event = await service.call(
        "POST", "/v1/events", json={"type": "contact.updated", "data": HOSTILE}
    )
    await step(sign_in, browser, service.key)
    await step(see_the_event_as_text, browser, event["id"])
    await step(see_the_payload_as_text, browser)
    await step(readable_at_phone_width, browser)


# -- a read-only key -------------------------------------------------------------------------


def offered_nothing_to_change(browser: Browser, hook_id: str, delivery_id: str) -> None:
    driver = browser.driver
    badge = browser.wait(lambda d: d.find_element(By.CSS_SELECTOR, ".badge-readonly"), "read-only")
    assert badge.text == "read-only"
    assert driver.find_elements(By.LINK_TEXT, "Create a webhook") == []
    browser.open(f"#/webhooks/{hook_id}")
    browser.wait(lambda d: d.find_elements(By.ID, "settings-title"), "the webhook's page")
    for caption in ("Send a test", "Disable", "Rotate the secret", "Recover", "Edit"):
        assert caption not in driver.find_element(By.TAG_NAME, "main").text, caption
    browser.open(f"#/webhooks/{hook_id}/deliveries/{delivery_id}")
    when_listed(browser, 1)
    browser.wait(lambda d: fact(d, "status") == "pending", "the delivery still pending")
    assert driver.find_elements(By.ID, "retry") == []
    assert [b.text for b in driver.find_elements(By.CSS_SELECTOR, "main button")] == []
    browser.shot("read-only-delivery")


def retry_from_the_page_anyway(browser: Browser, hook_id: str, delivery_id: str) -> int:
    """The request a Retry button would send, made by the page with its key: refused."""
    status: int = browser.driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch(arguments[0], {method: "POST", headers: {
            Authorization: "Bearer " + sessionStorage.getItem("dispatcher.console.key")}})
          .then((r) => done(r.status), () => done(0));
        """,
        f"/v1/webhooks/{hook_id}/deliveries/{delivery_id}/retry",
    )
    return status


async def test_a_read_only_key_is_offered_no_retry_and_the_api_refuses_it(
    browser: Browser, service: Service, receiver: Receiver, database_url: str
) -> None:
    browser.base = service.base
    hook_id, delivery_id = await failing_delivery(service, receiver)
    me = await service.call("GET", "/v1/me")
    db = await Database.open(database_url, min_size=1, max_size=1)
    try:
        _, reader = await workspaces.create_key(db, me["workspaceId"], ["webhooks:read"])
    finally:
        await db.close()
    await step(sign_in, browser, reader)
    await step(offered_nothing_to_change, browser, hook_id, delivery_id)
    retry = f"/v1/webhooks/{hook_id}/deliveries/{delivery_id}/retry"
    assert await service.status_of("POST", retry, reader) == 403
    assert await step(retry_from_the_page_anyway, browser, hook_id, delivery_id) == 403
    # Still failing, still attempted once: nothing was retried.
    delivery = await service.call("GET", f"/v1/webhooks/{hook_id}/deliveries/{delivery_id}")
    assert delivery["attempts"] == 1 and len(receiver.at("/hook")) == 1


def webhook_form_bounds(browser: Browser) -> dict[str, Any]:
    """The bounds the create form puts on its fields, and the rate limit's hint."""
    browser.open("#/webhooks/new")
    driver = browser.driver
    concurrency = browser.wait(lambda d: d.find_element(By.ID, "field-concurrency"), "the form")
    rate = driver.find_element(By.ID, "field-rateLimit")
    name = driver.find_element(By.ID, "field-name")
    timeout = driver.find_element(By.ID, "field-timeoutSeconds")
    schedule = driver.find_element(By.ID, "field-retrySchedule")
    return {
        "maxConcurrency": (concurrency.get_attribute("min"), concurrency.get_attribute("max")),
        "rateLimit": (rate.get_attribute("min"), rate.get_attribute("max")),
        "timeoutSeconds": (
            timeout.get_attribute("type"),
            timeout.get_attribute("min"),
            timeout.get_attribute("max"),
            timeout.get_attribute("step"),
        ),
        "retrySchedule": schedule.tag_name,
        "name": name.get_attribute("maxlength"),
        "hints": text_of(driver, ".webhook-form"),
    }


async def test_the_webhook_form_takes_its_bounds_from_the_api_document(
    browser: Browser, service: Service
) -> None:
    """The console writes no bound of its own: each comes from GET /v1/openapi.json (whose
    models take them from dispatcher/domain/endpoints.py)."""
    browser.base = service.base
    await step(sign_in, browser, service.key)
    found = await step(webhook_form_bounds, browser)
    document = await service.call("GET", "/v1/openapi.json")
    body = document["paths"]["/v1/webhooks"]["post"]["requestBody"]["content"]
    ref = body["application/json"]["schema"]["$ref"]
    fields = document["components"]["schemas"][ref.rsplit("/", 1)[-1]]["properties"]

    def bounds(name: str) -> tuple[str, str]:
        schema = fields[name]["anyOf"][0]
        return str(schema["minimum"]), str(schema["maximum"])

    assert found["maxConcurrency"] == bounds("maxConcurrency")
    assert found["rateLimit"] == bounds("rateLimit")
    assert found["name"] == str(fields["name"]["anyOf"][0]["maxLength"])
    assert "{}..{}; empty: no limit".format(*bounds("rateLimit")) in found["hints"]
    # An option passed through is drawn from its schema alone (no entry of its own in the JS):
    # a number input with the document's bounds, or a JSON text area for an array.
    kind, low, high, step_ = found["timeoutSeconds"]
    low_given, high_given = bounds("timeoutSeconds")
    assert (kind, float(low), float(high), step_) == (
        "number",
        float(low_given),
        float(high_given),
        "any",
    )
    assert f"{low}..{high}; empty: the service default" in found["hints"]
    assert found["retrySchedule"] == "textarea"


# -- the event catalog -------------------------------------------------------------------------
# The "Event types" page: every type the catalog lists (`GET /v1/event-types`) with its
# description, its data's schema and an example, reached from the header by any key, whatever
# its scopes, and readable at a phone's width.

CATALOG_NAMES = [entry.name for entry in CATALOG]


def see_the_catalog(browser: Browser) -> None:
    """From the header's link: one section per type, with its description, schema, example."""
    driver = browser.driver
    link = browser.wait(lambda d: d.find_element(By.LINK_TEXT, "Event types"), "the section")
    link.click()
    browser.wait(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.event-type")) == len(CATALOG_NAMES),
        "every event type",
    )
    sections = driver.find_elements(By.CSS_SELECTOR, "section.event-type")
    assert [s.get_attribute("data-type") for s in sections] == CATALOG_NAMES
    by_name = {entry.name: entry for entry in CATALOG}
    for section in sections:
        entry = by_name[section.get_attribute("data-type") or ""]
        assert section.find_element(By.CSS_SELECTOR, ".description").text == entry.description
        example = section.find_element(By.CSS_SELECTOR, "details.example pre.json")
        assert json.loads(example.text) == json.loads(json.dumps(entry.example))
        schema = section.find_element(By.CSS_SELECTOR, "details.schema pre.json")
        shown = json.loads(schema.get_attribute("textContent") or "")
        assert shown["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert driver.find_element(By.CSS_SELECTOR, "#nav a[aria-current='page']").text == (
        "Event types"
    )
    browser.shot("event-types")


def open_one_type(browser: Browser) -> None:
    """A link to one type opens its schema."""
    browser.driver.find_element(By.LINK_TEXT, "delivery.exhausted").click()
    section = browser.wait(
        lambda d: d.find_element(By.CSS_SELECTOR, "section[data-type='delivery.exhausted']"),
        "the type's section",
    )
    browser.wait(
        lambda d: (
            section.find_element(By.CSS_SELECTOR, "details.schema").get_attribute("open")
            is not None
        ),
        "its schema open",
    )
    assert '"lastError"' in section.find_element(By.CSS_SELECTOR, "details.schema pre").text


def event_types_at_phone_width(browser: Browser) -> None:
    browser.viewport(*PHONE, mobile=True)
    browser.open("#/event-types")
    browser.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "section.event-type"), "the page")
    assert browser.fits_its_width()
    browser.shot("phone-event-types")
    for entry in browser.log():
        assert "Content Security Policy" not in entry["message"], entry
        assert "Uncaught" not in entry["message"], entry


def seen_by_a_key_without_read_scopes(browser: Browser, key: str) -> None:
    """A key that may only publish events still has the catalog (any key may read it)."""
    browser.open()
    field = browser.wait(lambda d: d.find_element(By.ID, "api-key"), "the sign-in form")
    field.send_keys(key, Keys.ENTER)
    browser.wait(lambda d: d.find_elements(By.ID, "sign-out"), "signed in")
    nav = browser.wait(lambda d: d.find_element(By.ID, "nav"), "the header")
    browser.wait(lambda d: "Event types" in nav.text, "the section offered")
    assert "Webhooks" not in nav.text and "Events\n" not in nav.text
    browser.open("#/event-types")
    browser.wait(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.event-type")) == len(CATALOG_NAMES),
        "every event type",
    )


async def test_the_event_types_page_shows_each_type_with_its_schema_and_example(
    browser: Browser,
    service: Service,
    database_url: str,
) -> None:
    browser.base = service.base
    await step(sign_in, browser, service.key)
    await step(see_the_catalog, browser)
    await step(open_one_type, browser)
    await step(event_types_at_phone_width, browser)
    me = await service.call("GET", "/v1/me")
    db = await Database.open(database_url, min_size=1, max_size=1)
    try:
        _, publisher = await workspaces.create_key(db, me["workspaceId"], ["events:write"])
    finally:
        await db.close()
    browser.driver.delete_all_cookies()
    await step(lambda: browser.driver.execute_script("sessionStorage.clear()"))
    await step(seen_by_a_key_without_read_scopes, browser, publisher)


def mutual_tls_shown(browser: Browser, hook_id: str) -> str:
    browser.open(f"#/webhooks/{hook_id}")
    browser.wait(lambda d: "mutual TLS" in text_of(d, "dl.settings"), "the webhook's settings")
    return text_of(browser.driver, "main")


async def test_the_webhook_page_shows_mutual_tls_never_its_key(
    browser: Browser, service: Service
) -> None:
    browser.base = service.base
    issued = Authority().issue("console client")
    tls = {"clientCertificate": issued.certificate, "clientKey": issued.key}
    body = {"url": "https://hooks.example.com/in", "events": ["contact.updated"], "tls": tls}
    hook = await service.call("POST", "/v1/webhooks", json=body)
    await step(sign_in, browser, service.key)
    shown = await step(mutual_tls_shown, browser, hook["id"])
    assert "on: client certificate CN=console client" in shown
    assert "the system's CAs" in shown
    assert issued.key.splitlines()[1] not in browser.driver.page_source


# -- a webhook's OAuth auth: shown and edited, never its secret ------------------------------

AUTH_SECRET = "console-Secret-never-shown-9f3a"
TOKEN_URL = "https://auth.example.com/oauth/token"
CONSOLE_AUTH = {"type": "oauth2", "tokenUrl": TOKEN_URL, "clientId": "console-client"}


def create_with_auth_through_the_form(browser: Browser) -> None:
    browser.open("#/webhooks/new")
    driver = browser.driver
    url = browser.wait(lambda d: d.find_element(By.ID, "field-url"), "the form")
    url.send_keys("https://hooks.example.com/in")
    driver.find_element(By.CSS_SELECTOR, ".events-choice input[type=checkbox]").click()
    auth = driver.find_element(By.ID, "field-auth")
    assert "clientSecret" in text_of(driver, ".webhook-form")  # the hint says how
    auth.send_keys(json.dumps({**CONSOLE_AUTH, "clientSecret": AUTH_SECRET}))
    driver.find_element(By.CSS_SELECTOR, ".webhook-form button[type=submit]").click()
    browser.wait(lambda d: "Webhook created" in d.page_source, "the webhook created")


def see_the_auth_without_the_secret(browser: Browser, hook_id: str) -> None:
    browser.open(f"#/webhooks/{hook_id}")
    driver = browser.driver
    browser.wait(
        lambda d: "oauth2: client console-client at " + TOKEN_URL in text_of(d, "dl.settings"),
        "the auth in words",
    )
    auth = driver.find_element(By.ID, "field-auth")  # the edit form, pre-filled
    assert json.loads(auth.get_attribute("value") or "{}")["clientId"] == "console-client"
    assert AUTH_SECRET not in (auth.get_attribute("value") or "")
    assert AUTH_SECRET not in driver.page_source
    browser.shot("webhook-auth")


def change_the_scope_without_the_secret(browser: Browser) -> None:
    driver = browser.driver
    driver.find_element(By.CSS_SELECTOR, "details.edit summary").click()
    auth = driver.find_element(By.ID, "field-auth")
    auth.clear()
    auth.send_keys(json.dumps({**CONSOLE_AUTH, "scope": "hooks:write"}))
    driver.find_element(By.CSS_SELECTOR, "details.edit button[type=submit]").click()
    browser.wait(lambda d: "scope hooks:write" in text_of(d, "dl.settings"), "the new scope")
    assert AUTH_SECRET not in driver.page_source


async def test_the_auth_is_shown_and_edited_never_its_secret(
    browser: Browser, service: Service, database_url: str
) -> None:
    browser.base = service.base
    await step(sign_in, browser, service.key)
    await step(create_with_auth_through_the_form, browser)
    (hook,) = [h for h in (await service.call("GET", "/v1/webhooks"))["data"] if h["auth"]]
    assert hook["auth"] == CONSOLE_AUTH
    await step(see_the_auth_without_the_secret, browser, hook["id"])
    await step(change_the_scope_without_the_secret, browser)
    db = await Database.open(database_url, min_size=1, max_size=1)
    try:
        async with db.acquire() as conn:
            stored = await conn.fetchval("SELECT auth FROM webhooks WHERE id = $1", hook["id"])
    finally:
        await db.close()
    assert stored == {**CONSOLE_AUTH, "clientSecret": AUTH_SECRET, "scope": "hooks:write"}
