"""Headless Chromium for the report's page tests: where it is installed, and the arguments every run takes."""

from __future__ import annotations

import shutil
from pathlib import Path


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _chrome_args(exe: str, profile: Path) -> list[str]:
    return [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
        "--virtual-time-budget=3000",
    ]
