"""The console over HTTPS (`muster up --tls`): a browser signs in, and its session cookie never
travels in clear; a browser that does not trust the tracker's certificate gets nothing."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from muster.bus.connect import read_credentials_file

from .conftest import CHROMIUM, CHROMIUM_ARGS, Muster


def test_a_browser_signs_in_over_https_and_keeps_a_secure_cookie(muster: Muster, browser: Any) -> None:
    assert muster.tracker.startswith("https://127.0.0.1:")
    stranger = browser.browser_type.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)  # no pin, no CA
    try:
        refused = stranger.new_page()
        try:
            refused.goto(f"{muster.tracker}/ui/sign-in")
            raise AssertionError("a browser that does not trust the tracker's certificate was served")
        except Exception as err:  # noqa: BLE001 - playwright's error for a refused page
            assert "ERR_CERT_AUTHORITY_INVALID" in str(err), err
    finally:
        stranger.close()

    context = browser.new_context(base_url=muster.tracker)
    try:
        page = context.new_page()
        page.goto("/ui/clusters")
        expect(page).to_have_url(re.compile(re.escape(f"{muster.tracker}/ui/sign-in?next=/ui/clusters")))
        page.get_by_label("Access token").fill(read_credentials_file(muster.data_dir / "credentials"))
        page.get_by_role("button", name="Sign in").click()
        expect(page).to_have_url(f"{muster.tracker}/ui/clusters")
        expect(page.get_by_test_id("tenant")).to_have_text("default")
        session = next(c for c in context.cookies() if c["name"] == "muster_session")
        assert session["secure"] and session["httpOnly"] and session["sameSite"] == "Strict"
    finally:
        context.close()
