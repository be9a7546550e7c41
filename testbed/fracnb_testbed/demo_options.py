"""The demo's options checked and said in its own words, before anything starts. Pure, but for the
machine's time zone.

The timing rule is the hub's and the service's (``fracnb_spawner.culling.check_timing``), written
with the demo's option names; durations read as the hub writes them.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# How late the hub may hear of a notebook's activity: the fracnb service's activity_report_lag default.
ACTIVITY_LAG = 45


def option_problem(idle_timeout: int, warning_lead: int, cull_every: int, lag: int = ACTIVITY_LAG) -> str | None:
    """What is wrong with the demo's timing options, in the demo's words, or None. The same rule as the
    hub and the service apply at their start (fracnb_spawner.culling.check_timing), checked before
    anything starts."""
    if cull_every < 1:
        return f"--cull-every {cull_every}: give the seconds between culling passes, 1 or more"
    if idle_timeout < 0 or warning_lead < 0:
        return "--idle-timeout and --warning-lead are seconds, 0 or more (0: never stop idle servers; no warning)"
    if 0 < warning_lead <= lag:
        return (
            f"--warning-lead {warning_lead} is too short: a notebook's activity can take up to {lag} s to reach "
            f"the hub, so a server could be stopped right after its user came back. Use more than {lag}, or 0 "
            "for no warning"
        )
    if 0 < idle_timeout <= warning_lead + lag:
        shortest = -(-(warning_lead + lag + 1) // 30) * 30
        shorter_lead = f", or a --warning-lead under {idle_timeout - lag}" if idle_timeout - lag > lag + 1 else ""
        example = max(2 * lag + 30, idle_timeout)
        return (
            f"--idle-timeout {idle_timeout} is too short for --warning-lead {warning_lead}: a server must be able "
            f"to sit idle for the warning ({warning_lead} s) plus {lag} s (how late the hub may hear of a notebook's "
            f"activity), or servers in use would be warned. Use --idle-timeout {shortest} or more{shorter_lead}; "
            f"for quick culls, e.g. --idle-timeout {example} --warning-lead {lag + 15}"
        )
    return None


def zone_problem(name: str | None) -> str | None:
    if name is None:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"--time-zone {name!r} is not a time zone name; give one such as Europe/Berlin or America/New_York"
    return None


def local_zone_name() -> str:
    """This machine's IANA time zone ($TZ, else /etc/localtime's target, else /etc/timezone), else "UTC": the
    demo's browser runs here, so the hub's pages then show times in the zone JupyterLab shows them in."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    with suppress(OSError):
        candidates.append(os.readlink("/etc/localtime").partition("zoneinfo/")[2])
    with suppress(OSError):
        candidates.append(Path("/etc/timezone").read_text().strip())
    for name in candidates:
        if not name or name.startswith("/"):
            continue
        with suppress(ZoneInfoNotFoundError, ValueError):
            ZoneInfo(name)
            return name
    return "UTC"


def idle_policy_words(idle_timeout: int, warning_lead: int) -> str:
    """ "stopped after 15 min idle, with a warning in the notebook 10 min before" (the hub's duration words)."""
    from fracnb_spawner.common.clock import duration_text  # noqa: PLC0415 - the hub side, only to print

    if not idle_timeout:
        return "never stopped for idleness"
    warning = (
        f", with a warning in the notebook {duration_text(warning_lead)} before"
        if warning_lead
        else ", without a warning"
    )
    return f"stopped after {duration_text(idle_timeout)} idle{warning}"
