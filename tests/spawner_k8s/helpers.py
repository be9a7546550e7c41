"""What several cluster-tier tests do: follow the spawn form's
free count as the cluster changes (the form reads the hub's watch, so it follows, never at once)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fracnb_testbed.procs import wait_until_async


async def free_on_form(spawner: Any) -> int:
    """The "N free now" of the spawn form's one GPU choice."""
    (count,) = re.findall(r"(\d+) free now", await spawner.render_options_form())
    return int(count)


async def form_shows(viewer: Callable[[], Any], expected: int, timeout: float = 20) -> None:
    """Wait until the form of ``viewer()`` (a spawner) shows ``expected`` free."""

    async def shown() -> bool:
        return await free_on_form(viewer()) == expected

    await wait_until_async(shown, what=f"the form to show {expected} free", timeout=timeout, interval=0.05)


def ticket_of(spawner: Any) -> Any:
    """The coordinator ticket of ``spawner``'s spawn while it holds one in fracnb's own queue, else None."""
    return getattr(spawner.queue.place, "ticket", None)
