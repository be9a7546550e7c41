"""The replay's line per day and run (``bench.replay_report.run_line``) as a pattern with a group per figure:
read by the tests of the measures and of the quick replay."""

from __future__ import annotations

import re

RUN_LINE = re.compile(
    r"^replay\[(?P<day>[a-z]+)/(?P<run>[a-z-]+)\]: cluster h/card/day (?P<occupancy>[\d.]+); "
    r"training jobs/week (?P<jobs>\d+); training GPU-h redone (?P<redone>[\d.]+); served (?P<served>\d+); "
    r"wait p95 (?P<wait>[\d.]+) s; reclaim p95 (?P<reclaim>[\d.]+|-) s; "
    r"idle per researcher-hour (?P<idle>[\d.]+); slowdown p95 (?P<slowdown>[\d.]+)x; "
    r"busy culled (?P<busy_culled>\d+); state lost (?P<lost>\d+); "
    r"slowdown bound (?P<bound>[\d.]+)x; borrowed cards peak (?P<borrowed>\d+)$"
)
