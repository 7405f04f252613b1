"""A webhook's OAuth `auth` in the console, in headless Chromium against a real `dispatcher
serve`: created through the form with its client secret, shown on the webhook's page by type,
token URL and client id, never with the secret (not in the page, not in the edit form), and
edited without retyping the secret, which the server keeps."""

from __future__ import annotations

import json

from selenium.webdriver.common.by import By

from dispatcher.store.database import Database
from tests.browser import Browser
from tests.e2e.test_console_browser import Service, service, sign_in, step, text_of

__all__ = ["service"]  # the fixture, shared with the console's other browser tests

SECRET = "console-Secret-never-shown-9f3a"
TOKEN_URL = "https://auth.example.com/oauth/token"
AUTH = {"type": "oauth2", "tokenUrl": TOKEN_URL, "clientId": "console-client"}


def create_through_the_form(browser: Browser) -> None:
    browser.open("#/webhooks/new")
    driver = browser.driver
    url = browser.wait(lambda d: d.find_element(By.ID, "field-url"), "the form")
    url.send_keys("https://hooks.example.com/in")
    driver.find_element(By.CSS_SELECTOR, ".events-choice input[type=checkbox]").click()
    auth = driver.find_element(By.ID, "field-auth")
    assert "clientSecret" in text_of(driver, ".webhook-form")  # the hint says how
    auth.send_keys(json.dumps({**AUTH, "clientSecret": SECRET}))
    driver.find_element(By.CSS_SELECTOR, ".webhook-form button[type=submit]").click()
    browser.wait(lambda d: "Webhook created" in d.page_source, "the webhook created")


def see_it_without_the_secret(browser: Browser, hook_id: str) -> None:
    browser.open(f"#/webhooks/{hook_id}")
    driver = browser.driver
    browser.wait(
        lambda d: "oauth2: client console-client at " + TOKEN_URL in text_of(d, "dl.settings"),
        "the auth in words",
    )
    auth = driver.find_element(By.ID, "field-auth")  # the edit form, pre-filled
    assert json.loads(auth.get_attribute("value") or "{}")["clientId"] == "console-client"
    assert SECRET not in (auth.get_attribute("value") or "")
    assert SECRET not in driver.page_source
    browser.shot("webhook-auth")


def change_the_scope_without_the_secret(browser: Browser) -> None:
    driver = browser.driver
    driver.find_element(By.CSS_SELECTOR, "details.edit summary").click()
    auth = driver.find_element(By.ID, "field-auth")
    auth.clear()
    auth.send_keys(json.dumps({**AUTH, "scope": "hooks:write"}))
    driver.find_element(By.CSS_SELECTOR, "details.edit button[type=submit]").click()
    browser.wait(lambda d: "scope hooks:write" in text_of(d, "dl.settings"), "the new scope")
    assert SECRET not in driver.page_source


async def test_the_auth_is_shown_and_edited_never_its_secret(
    browser: Browser, service: Service, database_url: str
) -> None:
    browser.base = service.base
    await step(sign_in, browser, service.key)
    await step(create_through_the_form, browser)
    (hook,) = [h for h in (await service.call("GET", "/v1/webhooks"))["data"] if h["auth"]]
    assert hook["auth"] == {**AUTH, "scope": None, "audience": None}
    await step(see_it_without_the_secret, browser, hook["id"])
    await step(change_the_scope_without_the_secret, browser)
    db = await Database.open(database_url, min_size=1, max_size=1)
    try:
        async with db.acquire() as conn:
            stored = await conn.fetchval("SELECT auth FROM webhooks WHERE id = $1", hook["id"])
    finally:
        await db.close()
    assert stored == {**AUTH, "clientSecret": SECRET, "scope": "hooks:write"}
