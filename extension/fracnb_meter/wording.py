"""How the notebook side writes quantities for people: one style in the widget, the simulator and
the front end. extension/src/format.ts writes the same, and both are held to the shared cases in
extension/test-data/ (byte-sizes.json, gpu-shares.json), as the hub's formatters are."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, tzinfo
from typing import Any

_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def rounded_text(value: float, places: int) -> str:
    """``value`` to ``places`` decimals, halves up, without trailing zeros: 1.25 -> '1.3', 2.0 -> '2'.

    The same float arithmetic as format.ts (floor(x * 10**places + 0.5)), so both agree to the last digit;
    Python's round() would round halves to even ('1.2')."""
    scale = 10**places
    text = f"{math.floor(value * scale + 0.5) / scale:.{places}f}"
    return text.rstrip("0").rstrip(".") if places else text


def format_bytes(value: int) -> str:
    """A size with its unit: the largest binary unit in which it is at least 1 to one decimal.

    2147483648 -> '2 GiB', 1342177280 -> '1.3 GiB', 524288000 -> '500 MiB', 0 -> '0 B'."""
    for unit, size in _UNITS:
        text = rounded_text(value / size, 1)
        if float(text) >= 1:
            return f"{text} {unit}"
    return f"{value} B"


def format_amount(gpus: float) -> str:
    """An amount of GPUs, at most three decimals: '0.25', '0.333', '5.75', '2'."""
    return rounded_text(gpus, 3)


def _gpu_unit(amount: str) -> str:
    return "GPU" if 0 < float(amount) <= 1 else "GPUs"


def format_gpus(gpus: float) -> str:
    """An amount of GPUs held or allowed: '0 GPUs', '0.25 GPU', '1 GPU', '2 GPUs'."""
    amount = format_amount(gpus)
    return f"{amount} {_gpu_unit(amount)}"


def format_share(gpus: float) -> str:
    """A server's share of GPUs: '0.25 GPU', '1 GPU', '2 GPUs', and 'no GPU' for none."""
    amount = format_amount(gpus)
    return "no GPU" if float(amount) == 0 else f"{amount} {_gpu_unit(amount)}"


def format_use(used: float, limit: float) -> str:
    """A use against a limit, in the limit's unit: '0 of 1 GPU', '0.75 of 2 GPUs'."""
    amount = format_amount(limit)
    return f"{format_amount(used)} of {amount} {_gpu_unit(amount)}"


# ---- the culling warning (extension/src/wording.ts writes the same; test-data/cull-warnings.json) ----


def clock_time(moment: datetime, zone: tzinfo | None = None) -> str:
    """'14:05 CET': the time of day on a 24-hour clock in ``zone`` (default: this machine's), with the
    zone's abbreviation, as the hub's pages and the JupyterLab panel write times."""
    local = moment.astimezone(zone)
    return f"{local:%H:%M} {zone_abbreviation(local)}".strip()


def zone_abbreviation(local: datetime) -> str:
    """'CET', 'EST', 'UTC'; where the time zone database has only an offset ('+04', '+0530'), it as the
    browser writes it: 'GMT+4', 'GMT+5:30' (extension/src/format.ts zoneName)."""
    name = local.tzname() or ""
    if not name or name[0] not in "+-" or not name[1:].isdigit():
        return name
    hours, minutes = int(name[1:3]), name[3:5]
    return f"GMT{name[0]}{hours}" + (f":{minutes}" if minutes and minutes != "00" else "")


def _minutes_text(seconds_left: float) -> str:
    # Whole minutes rounded up, at least 1: the server stops at the first culling pass after the deadline.
    minutes = max(1, math.ceil(seconds_left / 60))
    if minutes < 60:
        return f"in {minutes} {'minute' if minutes == 1 else 'minutes'}"
    hours, rest = divmod(minutes, 60)
    return f"in {hours} h" if rest == 0 else f"in {hours} h {rest} min"


def cull_warning(deadline: Mapping[str, Any] | None, zone: tzinfo | None = None) -> str | None:
    """The notebook's warning for a deadline of the service's report (service-me.schema.json
    ``/$defs/deadline``), or None when it is not in its warning time."""
    if deadline is None or not deadline["warning"]:
        return None
    reason = deadline["reason"]
    # Said only where the service will ask the server to save first (the deadline's saves_variables).
    saved = " Its variables will be saved for your next start." if deadline.get("saves_variables") else ""
    if reason == "demand":
        cull_at = datetime.fromisoformat(deadline["cull_at"].replace("Z", "+00:00"))
        at = clock_time(cull_at, zone)
        return f"Someone is waiting for a GPU; this idle server stops at {at} unless you use it.{saved}"
    when = _minutes_text(deadline["seconds_left"])
    if reason == "idle":
        return f"Idle: this server will be stopped {when} unless you use it.{saved}"
    if reason == "gpu-unused":
        return f"GPU unused: this idle server will be stopped {when} unless it uses the GPU.{saved}"
    if reason == "gpu-unused-busy":
        return (
            f"GPU unused: this server will be stopped {when}, even while a cell runs, unless it uses the GPU."
            " Save your work."
        )
    # At its maximum age a busy kernel is stopped too, and a busy kernel cannot be saved.
    after = " Its idle kernels' variables will be saved." if saved else " Save your work."
    return f"This server reaches its maximum age and will be stopped {when}, even if in use.{after}"


# ---- the session's peak (extension/src/wording.ts writes the same; test-data/session-peaks.json) ----


def session_peak(peak_bytes: int | None, budget_bytes: int | None) -> str | None:
    """'This session peaked at 6.1 GiB of 20 GiB.', or None before the first reading."""
    if peak_bytes is None:
        return None
    against = "" if budget_bytes is None else f" of {format_bytes(budget_bytes)}"
    return f"This session peaked at {format_bytes(peak_bytes)}{against}."


# ---- hibernation (extension/src/wording.ts writes the same; test-data/restore-offers.json) ----


def saved_when(saved_at: datetime, now: datetime, zone: tzinfo | None = None) -> str:
    """'14:05 EST' in ``zone`` (default: this machine's), with the day when it was not today: '24 Nov 14:05 EST'."""
    local, today = saved_at.astimezone(zone), now.astimezone(zone)
    day = "" if local.date() == today.date() else f"{local.day} {local.strftime('%b')} "
    return f"{day}{clock_time(saved_at, zone)}"


def saved_variables(manifest: Mapping[str, Any], now: datetime, zone: tzinfo | None = None) -> str:
    """'the 4 variables saved at 19:37 EST (7.6 MiB)': a saved state's manifest, for a question about it."""
    count = len(manifest["variables"])
    when = saved_when(datetime.fromisoformat(manifest["saved_at"]), now, zone)
    noun = "variable" if count == 1 else "variables"
    return f"the {count} {noun} saved at {when} ({format_bytes(manifest['bytes']['total'])})"


def restore_offer(saved_at: datetime, size_bytes: int, now: datetime, zone: tzinfo | None = None) -> str:
    """'Restore variables from 14:05 EST (3.2 GiB)'; the day too when it was not today: 'from 24 Nov 14:05 EST'."""
    return f"Restore variables from {saved_when(saved_at, now, zone)} ({format_bytes(size_bytes)})"


def conflict_line(report: Mapping[str, Any]) -> str:
    """'Nothing was restored yet: lr (yours 0.5, saved 0.1) differs.'; without the values (a report of an
    older fracnb), 'lr differs between this kernel and the saved state.' (src/offers.ts conflictQuestion
    writes the same)."""
    values = {item["name"]: item for item in report.get("conflict_values", [])}
    names = ", ".join(
        f"{name} (yours {values[name]['kernel']}, saved {values[name]['saved']})" if name in values else name
        for name in report["conflicts"]
    )
    verb = "differs" if len(report["conflicts"]) == 1 else "differ"
    where = "" if values else " between this kernel and the saved state"
    return f"Nothing was restored yet: {names} {verb}{where}."


def restore_summary(report: Mapping[str, Any]) -> list[str]:
    """What a restore did, one line each (restore-report.schema.json), for the magic and the widget."""
    status, lines = report["status"], []
    if status == "conflict":
        return [conflict_line(report)]
    if status in ("none", "refused", "confirm") or (status == "failed" and not report["failed"]):
        lines.append(report["reason"] or "Nothing was restored.")
        lines += [f"  {warning}" for warning in report["warnings"]] if status == "confirm" else []
        return lines
    restored = report["restored"]
    noun = "variable" if len(restored) == 1 else "variables"
    lines.append(f"Restored {len(restored)} {noun} ({format_bytes(report['bytes'])}): {', '.join(restored)}.")
    kept = [name for name in report.get("conflicts", []) if name not in restored]
    lines += [f"Kept your own values of {', '.join(kept)}."] if kept else []
    lines += [f"{report['reason'][0].upper()}{report['reason'][1:]}."] if report["reason"] else []
    lines += [f"Not restored: {item['name']} ({item['reason']})." for item in report["failed"]]
    if report["skipped_at_save"]:
        skipped = ", ".join(f"{item['name']} ({item['reason']})" for item in report["skipped_at_save"])
        lines.append(f"Not saved at the stop: {skipped}.")
    lines += report["notices"]
    lines += [f"Saved with other versions: {warning}." for warning in report["warnings"]]
    return lines
