"""Fixtures of the browser tests: Debian's chromium driven by Playwright's Python package.

Never ``playwright install`` (it downloads a browser, and there is no network): the tests use
/usr/bin/chromium, which ``make test`` installs with apt. Without it (or without the
playwright package, which the test extra installs) they fail, saying why. Screenshots go to
tests/browser/artifacts/ (gitignored), one folder per test.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
# As NOTES-ecosystem.md found for Debian's chromium run as root, offline.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-default-apps", "--disable-extensions", "--log-level=3"]


@pytest.fixture(scope="session")
def browser():
    from playwright import sync_api  # the test extra's; an ImportError here fails the browser tests
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing (make test installs Debian's chromium)", pytrace=False)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def artifacts(request) -> Path:
    """A folder for this test's screenshots."""
    folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@dataclass
class WatchedPage:
    """A page, with the console errors (CSP violations among them) and dialogs it produced."""

    page: object
    console_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@pytest.fixture
def watched(browser) -> WatchedPage:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watched = WatchedPage(context.new_page())
    watched.page.on("console", lambda message: message.type == "error" and watched.console_errors.append(message.text))
    watched.page.on("pageerror", lambda error: watched.console_errors.append(str(error)))

    def on_dialog(dialog) -> None:
        watched.dialogs.append(dialog.message)
        dialog.dismiss()

    watched.page.on("dialog", on_dialog)
    yield watched
    context.close()
