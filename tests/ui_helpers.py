"""What the browser tests share: waiting for something to happen (never a fixed sleep) and Airflow's login."""

from __future__ import annotations

import time


def wait_for(fn, timeout: float = 60, what: str = "the page"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = fn()
            if found:
                return found
        except Exception:  # noqa: BLE001 - the element is not there yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"{what} did not appear within {timeout} s")


def log_in(browser, base: str, password: str, user: str = "admin") -> None:
    """Airflow's own login form (simple auth manager), as a person fills it."""
    from selenium.webdriver.common.by import By

    browser.get(base + "/")
    wait_for(lambda: browser.find_element(By.NAME, "username"), what="the login form").send_keys(user)
    browser.find_element(By.NAME, "password").send_keys(password)
    next(b for b in browser.find_elements(By.TAG_NAME, "button") if b.text == "Sign in").click()
    wait_for(lambda: "/auth/login" not in browser.current_url, what="the home page")
