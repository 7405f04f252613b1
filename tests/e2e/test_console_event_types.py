"""The console's "Event types" page, in headless Chromium against a real `dispatcher serve`
(tests/e2e/test_console_browser.py's fixtures): every type the catalog lists
(`GET /v1/event-types`) with its description, its data's schema and an example, reached from
the header by any key, whatever its scopes, and readable at a phone's width."""

from __future__ import annotations

import json

from selenium.webdriver.common.by import By

from dispatcher.domain.catalog import CATALOG
from dispatcher.store import workspaces
from dispatcher.store.database import Database
from tests.browser import PHONE, Browser
from tests.e2e.test_console_browser import Service, service, sign_in, step  # noqa: F401

NAMES = [entry.name for entry in CATALOG]


def see_the_catalog(browser: Browser) -> None:
    """From the header's link: one section per type, with its description, schema, example."""
    driver = browser.driver
    link = browser.wait(lambda d: d.find_element(By.LINK_TEXT, "Event types"), "the section")
    link.click()
    browser.wait(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.event-type")) == len(NAMES),
        "every event type",
    )
    sections = driver.find_elements(By.CSS_SELECTOR, "section.event-type")
    assert [s.get_attribute("data-type") for s in sections] == NAMES
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


def readable_at_phone_width(browser: Browser) -> None:
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
    from selenium.webdriver.common.keys import Keys

    field.send_keys(key, Keys.ENTER)
    browser.wait(lambda d: d.find_elements(By.ID, "sign-out"), "signed in")
    nav = browser.wait(lambda d: d.find_element(By.ID, "nav"), "the header")
    browser.wait(lambda d: "Event types" in nav.text, "the section offered")
    assert "Webhooks" not in nav.text and "Events\n" not in nav.text
    browser.open("#/event-types")
    browser.wait(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "section.event-type")) == len(NAMES),
        "every event type",
    )


async def test_the_event_types_page_shows_each_type_with_its_schema_and_example(
    browser: Browser,
    service: Service,  # noqa: F811 (the fixture imported above)
    database_url: str,
) -> None:
    browser.base = service.base
    await step(sign_in, browser, service.key)
    await step(see_the_catalog, browser)
    await step(open_one_type, browser)
    await step(readable_at_phone_width, browser)
    me = await service.call("GET", "/v1/me")
    db = await Database.open(database_url, min_size=1, max_size=1)
    try:
        _, publisher = await workspaces.create_key(db, me["workspaceId"], ["events:write"])
    finally:
        await db.close()
    browser.driver.delete_all_cookies()
    await step(lambda: browser.driver.execute_script("sessionStorage.clear()"))
    await step(seen_by_a_key_without_read_scopes, browser, publisher)
