"""A real browser: headless Chromium driven by Selenium logs in through the
gateway at the real OpenID provider, sees the backend's answer, logs out
(RP-initiated, confirmed at the provider; the provider's introspection then
says the session's tokens are revoked), and logs in again. One provider
process and one browser for the module.

Chromium and chromedriver are Debian's (``/usr/bin/chromium``,
``/usr/bin/chromedriver``); when missing, these tests fail (never skip).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from typing import Any, Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait
from stack import Stack

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: Any) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("oidc-browser"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def driver(tmp_path_factory: Any) -> Iterator[webdriver.Chrome]:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise AssertionError(f"{path} is missing: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tmp_path_factory.mktemp("chromium-profile")
    options.add_argument(f"--user-data-dir={profile}")
    d = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    d.set_page_load_timeout(30)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def fresh(d: webdriver.Chrome) -> None:
    """No cookies at all, the provider's included (delete_all_cookies only clears the current site's)."""
    d.execute_cdp_cmd("Network.clearBrowserCookies", {})


def wait(d: webdriver.Chrome, condition: Any, timeout: float = 15) -> Any:
    return WebDriverWait(d, timeout).until(condition)


def log_in(d: webdriver.Chrome, user: str, password: str) -> None:
    wait(d, ec.presence_of_element_located((By.ID, "username")))
    d.find_element(By.ID, "username").send_keys(user)
    d.find_element(By.ID, "password").send_keys(password)
    d.find_element(By.ID, "submit").click()


def backend_answer(d: webdriver.Chrome, stack: Stack, path: str) -> dict[str, Any]:
    wait(d, lambda drv: drv.current_url.startswith(stack.url(path)))
    text = d.find_element(By.TAG_NAME, "body").text
    return json.loads(text)


def headers_of(answer: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in answer["headers"]}


@pytest.mark.parametrize("prefix,cookie", [("cookie", "c_session"), ("redis", "r_session")])
def test_login_logout_login(stack: Stack, driver: webdriver.Chrome, prefix: str, cookie: str) -> None:
    d = driver
    fresh(d)
    d.get(stack.url(f"/{prefix}/hello?lang=en"))
    # sent to the provider's login page
    wait(d, ec.title_is("Sign-in"))
    assert d.current_url.startswith(stack.idp.issuers["a"] + "/interaction/")
    log_in(d, "alice", "wonderland")
    answer = backend_answer(d, stack, f"/{prefix}/hello?lang=en")
    seen = headers_of(answer)
    assert seen["x-user-email"] == "alice@example.org"
    assert cookie not in seen.get("cookie", "")  # the session cookie never reaches the backend
    names = {c["name"]: c for c in d.get_cookies()}
    assert names[cookie]["httpOnly"] is True and names[cookie]["sameSite"] == "Lax"
    jar = {c["name"]: c["value"] for c in d.get_cookies()}
    access, refresh = stack.sealed_tokens(cookie, jar) if prefix == "cookie" else stack.redis_tokens(jar[cookie])
    assert stack.active(access, "access_token") and stack.active(refresh, "refresh_token")
    # log out: the provider asks, then sends the browser to afterLogoutUrl
    d.get(stack.url(f"/{prefix}/logout"))
    button = wait(d, ec.element_to_be_clickable((By.ID, "logout-yes")))
    # the gateway revoked both tokens before it sent the browser to the provider (issue 32 item 8)
    assert not stack.active(refresh, "refresh_token") and not stack.active(access, "access_token")
    button.click()
    wait(d, lambda drv: drv.current_url == stack.url("/bye"))
    assert d.find_element(By.TAG_NAME, "body").text == "bye"
    assert cookie not in {c["name"] for c in d.get_cookies()}
    # and again: a real login, the provider's session ended too
    d.get(stack.url(f"/{prefix}/again"))
    wait(d, ec.title_is("Sign-in"))
    log_in(d, "bob", "builder")
    assert headers_of(backend_answer(d, stack, f"/{prefix}/again"))["x-user-email"] == "bob@example.org"


def test_wrong_password_stays_at_the_provider(stack: Stack, driver: webdriver.Chrome) -> None:
    d = driver
    fresh(d)
    d.get(stack.url("/cookie/private"))
    wait(d, ec.title_is("Sign-in"))
    log_in(d, "alice", "not-her-password")
    wait(d, ec.presence_of_element_located((By.ID, "error")))
    assert re.search("invalid", d.find_element(By.ID, "error").text)
    assert "c_session" not in {c["name"] for c in d.get_cookies()}


def test_refreshed_cookie_from_a_fetch_post(stack: Stack, driver: webdriver.Chrome) -> None:
    """Cookie store, tokens that expire in 2 s: a page's ``fetch()`` POST
    after expiry is refreshed and admitted in place (no redirect a script
    could not follow), and Chromium keeps the renewed session cookie from
    that answer: the next navigation is admitted with the same tokens."""
    d = driver
    fresh(d)
    d.get(stack.url("/cshort/page"))
    wait(d, ec.title_is("Sign-in"))
    log_in(d, "alice", "wonderland")
    backend_answer(d, stack, "/cshort/page")
    old = {c["name"]: c["value"] for c in d.get_cookies()}["cs_session"]
    time.sleep(2.2)
    result = d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/cshort/api', {method: 'POST', body: 'x=1', redirect: 'manual'})"
        ".then(r => r.text().then(t => done([r.status, t]))).catch(e => done([0, String(e)]));")
    assert result[0] == 200, result
    posted = headers_of(json.loads(result[1]))
    assert posted["x-user-email"] == "alice@example.org"
    renewed = {c["name"]: c["value"] for c in d.get_cookies()}["cs_session"]
    assert renewed != old
    d.get(stack.url("/cshort/next"))
    after = headers_of(backend_answer(d, stack, "/cshort/next"))
    assert after["x-access-token"] == posted["x-access-token"]  # no second refresh: the cookie was kept
