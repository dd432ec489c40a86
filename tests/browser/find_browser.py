"""Which Chromium the browser test drives, and whether a missing one skips or fails the test.

Looked for in order: $CHROMIUM, /usr/bin/chromium (Debian), /snap/bin/chromium (Ubuntu has
Chromium only as a snap), then chromium, chromium-browser and google-chrome on PATH. Without
one, the browser test is skipped with one line saying how to get one; under CI=true it fails.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

FIXED_PLACES = (Path("/usr/bin/chromium"), Path("/snap/bin/chromium"))
NAMES_ON_PATH = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
HOW_TO_GET_ONE = ("`make browser` installs one (Debian: apt-get install chromium; Ubuntu: "
                  "snap install chromium; root or sudo), or point CHROMIUM=/path/to/chromium at one")


def find_chromium(environ=None, fixed_places=FIXED_PLACES) -> Path | None:
    """The first Chromium found, or None. A $CHROMIUM that is not there counts as none found."""
    environ = os.environ if environ is None else environ
    if environ.get("CHROMIUM"):
        chosen = Path(environ["CHROMIUM"])
        return chosen if is_executable(chosen) else None
    for place in fixed_places:
        if is_executable(place):
            return place
    for name in NAMES_ON_PATH:
        found = shutil.which(name, path=environ.get("PATH", ""))
        if found:
            return Path(found)
    return None


def is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def looked_at(environ=None) -> str:
    environ = os.environ if environ is None else environ
    if environ.get("CHROMIUM"):
        return f"CHROMIUM={environ['CHROMIUM']}"
    return ", ".join([*(str(p) for p in FIXED_PLACES), *NAMES_ON_PATH]) + " on PATH"


def in_ci(environ=None) -> bool:
    environ = os.environ if environ is None else environ
    return environ.get("CI", "").lower() in ("1", "true", "yes")


def is_snap(chromium: Path) -> bool:
    """A snap's Chromium sees only non-hidden files in $HOME, not /tmp (strict confinement).
    Ubuntu's /usr/bin/chromium-browser is a small script that runs the snap."""
    if str(chromium).startswith("/snap/") or str(chromium.resolve()).startswith("/snap/"):
        return True
    try:
        return chromium.stat().st_size < 16384 and b"/snap/" in chromium.read_bytes()
    except OSError:
        return False


def profile_parent(chromium: Path, default: Path) -> Path:
    """Where the browser profile can live: the snap's own writable directory for a snap."""
    if is_snap(chromium):
        return Path.home() / "snap" / "chromium" / "common" / "workbook-browser-test"
    return default


if __name__ == "__main__":  # `make browser`: print the Chromium found, or exit 1
    import sys

    found = find_chromium()
    print(found if found else f"none (looked at {looked_at()})")
    sys.exit(0 if found else 1)
