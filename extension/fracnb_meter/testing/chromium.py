"""Debian's Chromium for the browser tests: where it is and how it must start here.

Never a browser downloaded by Playwright. The flags keep it headless-friendly as root and
stop its background connections, which a machine without network would refuse.
"""

from __future__ import annotations

import os
from pathlib import Path

CHROMIUM = Path(os.environ.get("FRACNB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
