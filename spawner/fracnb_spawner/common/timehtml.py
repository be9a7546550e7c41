"""Times on the hub's pages in the reader's own time zone, with its abbreviation.

A time is written as ``<time datetime="2026-11-25T13:05:00Z" data-fracnb-time="clock">14:05 CET</time>``:
the hub's display zone (``c.FracnbQueue.display_timezone``) is the text without JavaScript, and
:data:`LOCAL_TIMES_SCRIPT`, on the same page, rewrites it in the browser's zone ("08:05 EST"), as the
notebook's own pages show times. Pure: the script is a constant.
"""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from markupsafe import Markup

from fracnb_spawner.common.clock import clock_text, moment_text

# Rewrites every <time data-fracnb-time> in the browser's zone: "clock" as "14:05 CET", "moment" as
# "2026-11-25 14:05 CET". Runs where it stands (for what is above it), again once the page is parsed, and
# whenever the page adds elements (the progress page's headlines, which come from its event stream); a
# time already written is not written again, so that its own change does not call it back forever.
LOCAL_TIMES_SCRIPT = Markup("""<script>(function () {
  function parts(moment) {
    var found = {};
    new Intl.DateTimeFormat(undefined, {year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
      minute: "2-digit", hourCycle: "h23", timeZoneName: "short"}).formatToParts(moment).forEach(function (part) {
      found[part.type] = part.value;
    });
    return found;
  }
  function localise() {
    document.querySelectorAll("time[data-fracnb-time]").forEach(function (element) {
      var moment = new Date(element.getAttribute("datetime"));
      if (isNaN(moment.getTime())) return;
      var p = parts(moment), clock = p.hour + ":" + p.minute + " " + p.timeZoneName;
      var date = p.year + "-" + p.month + "-" + p.day + " ";
      var text = element.dataset.fracnbTime === "moment" ? date + clock : clock;
      if (element.textContent !== text) element.textContent = text;
    });
  }
  localise();
  document.addEventListener("DOMContentLoaded", localise);
  if (window.MutationObserver && !window.fracnbLocalTimes) {
    window.fracnbLocalTimes = new MutationObserver(localise);
    window.fracnbLocalTimes.observe(document.documentElement, {childList: true, subtree: true});
  }
})();</script>""")


def _utc_stamp(moment: datetime) -> str:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
    return aware.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def clock_html(moment: datetime, zone: ZoneInfo | None = None) -> Markup:
    """ "14:05 CET" as a <time> the page's script shows in the browser's zone; a naive ``moment`` is UTC."""
    return Markup('<time datetime="{}" data-fracnb-time="clock">{}</time>').format(
        _utc_stamp(moment), clock_text(moment, zone)
    )


def moment_html(moment: datetime, zone: ZoneInfo | None = None) -> Markup:
    """ "2026-11-25 14:05 CET" as a <time> the page's script shows in the browser's zone."""
    return Markup('<time datetime="{}" data-fracnb-time="moment">{}</time>').format(
        _utc_stamp(moment), moment_text(moment, zone)
    )


def with_times(text: str | Markup, moments: list[datetime], zone: ZoneInfo | None = None) -> Markup:
    """``text`` (escaped unless it is Markup already) with each of ``moments``, written in it as
    :func:`~fracnb_spawner.common.clock.clock_text` writes it, as a <time> (:func:`clock_html`). The
    moments are in the order the text says them: each is looked for after the one before it."""
    html, start = str(Markup.escape(text)), 0
    for moment in moments:
        written, element = clock_text(moment, zone), str(clock_html(moment, zone))
        found = html.find(written, start)
        if found < 0:
            continue
        html = html[:found] + element + html[found + len(written) :]
        start = found + len(element)
    return Markup(html)  # noqa: S704 -- escaped above; the <time> elements are built from formatted times
