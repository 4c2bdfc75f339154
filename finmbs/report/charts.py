"""Bar charts as inline SVG geometry (no plotting library, nothing fetched when the report opens)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

COLORS = {"hard": "#c0392b", "goldilocks": "#d4a017", "stale": "#7f8c8d"}


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    count: int
    series: str
    group: str
    color: str


@dataclass
class Chart:
    """Everything an <svg> needs: bars, y ticks, group labels, legend."""

    title: str
    width: int
    height: int
    left: int
    bottom: float
    bars: list[Bar] = field(default_factory=list)
    ticks: list[tuple[float, int]] = field(default_factory=list)
    labels: list[tuple[float, str]] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    x_title: str = ""
    note: str = ""

    @property
    def empty(self) -> bool:
        """No bar above zero: the template says "no data" instead of drawing an empty chart."""
        return not any(bar.count for bar in self.bars)


def nice_step(top: int, most: int = 5) -> int:
    """The smallest 1/2/5 x 10^k step that draws at most `most` ticks up to `top`."""
    magnitude = 10 ** max(0, int(math.log10(max(top, 1))) - 1)
    for base in (1, 2, 5, 10, 20, 50, 100):
        if top / (base * magnitude) <= most:
            return base * magnitude
    return top


def bar_chart(
    title: str, groups: list[tuple[str, list[tuple[str, int]]]], x_title: str = "", width: int = 460, height: int = 240
) -> Chart:
    """Groups of bars side by side (a group per x label, a bar per series), colored by series."""
    left, right, top, bottom = 44, 12, 40, height - 44
    top_count = max([count for _, bars in groups for _, count in bars] + [1])
    step = nice_step(top_count)
    axis_top = step * math.ceil(top_count / step)
    scale = (bottom - top) / axis_top
    chart = Chart(title=title, width=width, height=height, left=left, bottom=bottom, x_title=x_title)
    chart.ticks = [(bottom - value * scale, value) for value in range(0, axis_top + 1, step)]
    slot = (width - left - right) / max(len(groups), 1)
    for index, (group, bars) in enumerate(groups):
        bar_width = min(46.0, slot * 0.8 / max(len(bars), 1))
        start = left + index * slot + (slot - bar_width * len(bars)) / 2
        for position, (series, count) in enumerate(bars):
            chart.bars.append(
                Bar(
                    x=start + position * bar_width,
                    y=bottom - count * scale,
                    width=bar_width - 2,
                    height=count * scale,
                    count=count,
                    series=series,
                    group=group,
                    color=COLORS.get(series, "#2c7fb8"),
                )
            )
        every = max(1, math.ceil(len(groups) / 24))  # at most ~24 x labels, always the first and the last
        if index % every == 0 or index == len(groups) - 1:
            chart.labels.append((left + index * slot + slot / 2, group))
    series_seen = dict.fromkeys(series for _, bars in groups for series, _ in bars)
    chart.legend = [(series, COLORS.get(series, "#2c7fb8")) for series in series_seen]
    return chart
