"""The replay's last line (``bench.replay_report.final_line``) as a pattern with a group per figure: read by the
tests of the measures and of the quick replay."""

from __future__ import annotations

import re

LAST_LINE = re.compile(
    r"^replay: packing (?P<packing>[\d.]+) \((?P<packing_run>time-slicing|DRA)\); "
    r"dev cards freed (?P<freed>\d+)/(?P<dev_cards>\d+) \((?P<freed_run>time-slicing|DRA)\); "
    r"idle per researcher-hour -(?P<idle_cut>-?[\d.]+)%; served (?P<served_before>\d+) -> (?P<served_after>\d+); "
    r"busy-day wait p95 (?P<wait>[\d.]+) s; slowdown p95 (?P<slowdown>[\d.]+)x; busy culled (?P<busy_culled>\d+); "
    r"state lost (?P<lost_before>\d+) -> (?P<lost_after>\d+)$"
)
