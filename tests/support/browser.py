"""Headless Chromium for the tests that look at a page: where it is, and how it starts."""

from __future__ import annotations

import shutil
from pathlib import Path


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError("chromium is required (the project's CI setup installs it)")


def headless(profile: Path, window: str, *args: str) -> list[str]:
    """The command line of a headless Chromium with its own profile directory."""
    return [
        chromium(),
        "--headless=new",
        "--no-sandbox",  # the tests run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--window-size={window}",
        *args,
    ]
