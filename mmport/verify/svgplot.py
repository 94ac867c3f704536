"""Small inline SVG plots of a count curve: HF and the port as two series on one panel.

The page that holds them must open anywhere, offline, so no plotting library
draws them: a panel is a few hundred characters of SVG. HF is drawn as blue
dots on a solid line, the port as orange crosses on a dashed one; where the
two differ a red band marks the size, so a one-off count (whose lines nearly
overlap) still shows::

    panel("1:1", points, "image area (px², log scale)", log_x=True)
    # '<svg class="count-plot" ...><circle class="hf-point" .../>...'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from mmport.verify.report import CurvePoint

__all__ = ["HF_COLOUR", "PORT_COLOUR", "nice_ticks", "panel"]

HF_COLOUR = "#1f6feb"
PORT_COLOUR = "#e8590c"
MISMATCH_COLOUR = "#ffd8d8"
# The panel and its plot area's margins (left, top, right, bottom), in px.
WIDTH, HEIGHT = 340, 250
MARGIN = (52, 30, 14, 42)


def nice_ticks(
    low: float, high: float, count: int = 5, min_step: float = 0.0
) -> list[float]:
    """About ``count`` round ticks (1, 2 or 5 × 10ⁿ apart) covering ``[low, high]``: ``(0, 9) → [0, 2, 4, 6, 8, 10]``."""
    if high <= low:
        low, high = low - 1, high + 1
    raw = (high - low) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = max(min_step, next(m * power for m in (1, 2, 5, 10) if m * power >= raw))
    first = math.floor(low / step) * step
    return [
        first + i * step for i in range(math.ceil((high - first) / step - 1e-9) + 1)
    ]


def _label(value: float) -> str:
    """A tick label: ``576``, ``2.5``, ``10k``, ``1M``."""
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


class _Scale:
    """Maps data to pixels along one axis (log10 when ``log``), over ticks that cover the data."""

    def __init__(
        self,
        values: Sequence[float],
        start: float,
        end: float,
        log: bool = False,
        counts: bool = False,
    ) -> None:
        self.log = log
        if log:
            low, high = (
                math.floor(math.log10(min(values))),
                math.ceil(math.log10(max(values))),
            )
            self.ticks = [10.0**p for p in range(low, max(high, low + 1) + 1)]
        elif counts:
            # Whole-number ticks, with room around the data: 576 against 577 must not sit on the frame.
            pad = max(1.0, 0.05 * (max(values) - min(values)))
            self.ticks = nice_ticks(
                max(0.0, min(values) - pad), max(values) + pad, min_step=1.0
            )
        else:
            self.ticks = nice_ticks(min(values), max(values))
        self.low, self.high = self._t(self.ticks[0]), self._t(self.ticks[-1])
        self.start, self.end = start, end

    def _t(self, value: float) -> float:
        return math.log10(value) if self.log else value

    def __call__(self, value: float) -> float:
        return self.start + (self._t(value) - self.low) / (self.high - self.low) * (
            self.end - self.start
        )


def panel(
    title: str, points: Sequence[CurvePoint], x_label: str, log_x: bool = False
) -> str:
    """One SVG panel: HF's and the port's count against ``x``, with axes, a legend and mismatch bands."""
    left, top, right, bottom = MARGIN
    counts = [p.hf for p in points] + [p.port for p in points if p.port is not None]
    x = _Scale([p.x for p in points], left, WIDTH - right, log=log_x)
    y = _Scale(counts, HEIGHT - bottom, top, counts=True)
    parts = [
        f'<svg class="count-plot" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}: count against {escape(x_label)}">',
        f'<text class="panel-title" x="{left}" y="16">{escape(title)}</text>',
        *_legend(WIDTH - right),
        *_axes(x, y, x_label),
        *_mismatch_bands(points, x, top, HEIGHT - bottom),
        *_series(points, x, y),
        "</svg>",
    ]
    return "\n".join(parts)


def _legend(right: float) -> list[str]:
    return [
        f'<circle cx="{right - 96}" cy="12" r="4" fill="{HF_COLOUR}"/><text class="legend" x="{right - 88}" y="16">HF</text>',
        _cross(right - 50, 12, "legend-port"),
        f'<text class="legend" x="{right - 42}" y="16">port</text>',
    ]


def _axes(x: _Scale, y: _Scale, x_label: str) -> list[str]:
    left, top, right, bottom = (
        MARGIN[0],
        MARGIN[1],
        WIDTH - MARGIN[2],
        HEIGHT - MARGIN[3],
    )
    parts = [
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fbfcfd" stroke="#d0d7de"/>'
    ]
    for tick in y.ticks:
        py = y(tick)
        parts.append(
            f'<line x1="{left}" x2="{right}" y1="{py:.1f}" y2="{py:.1f}" stroke="#eaeef2"/>'
        )
        parts.append(
            f'<text class="tick" x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">{_label(tick)}</text>'
        )
    for tick in x.ticks:
        px = x(tick)
        parts.append(
            f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{bottom}" stroke="#eaeef2"/>'
        )
        parts.append(
            f'<text class="tick" x="{px:.1f}" y="{bottom + 15}" text-anchor="middle">{_label(tick)}</text>'
        )
    parts.append(
        f'<text class="axis" x="{(left + right) / 2}" y="{HEIGHT - 6}" text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text class="axis" transform="translate(13 {(top + bottom) / 2}) rotate(-90)" text-anchor="middle">count</text>'
    )
    return parts


def _mismatch_bands(
    points: Sequence[CurvePoint], x: _Scale, top: float, bottom: float
) -> list[str]:
    """A red band at each size where the port's count is not HF's (or the port raised)."""
    return [
        f'<rect class="mismatch" x="{x(p.x) - 5:.1f}" y="{top}" width="10" height="{bottom - top}" fill="{MISMATCH_COLOUR}"/>'
        for p in points
        if p.port != p.hf
    ]


def _series(points: Sequence[CurvePoint], x: _Scale, y: _Scale) -> list[str]:
    ordered = sorted(points, key=lambda p: p.x)
    hf_line = " ".join(f"{x(p.x):.1f},{y(p.hf):.1f}" for p in ordered)
    port_line = " ".join(
        f"{x(p.x):.1f},{y(p.port):.1f}" for p in ordered if p.port is not None
    )
    parts = [
        f'<polyline points="{hf_line}" fill="none" stroke="{HF_COLOUR}" stroke-width="1.5"/>',
        f'<polyline points="{port_line}" fill="none" stroke="{PORT_COLOUR}" stroke-width="1.5" stroke-dasharray="5 3"/>',
    ]
    for p in ordered:
        said = f"{p.item}: HF {p.hf}, port {p.port if p.port is not None else 'raised ' + p.error}"
        parts.append(
            f'<circle class="hf-point" cx="{x(p.x):.1f}" cy="{y(p.hf):.1f}" r="4" fill="{HF_COLOUR}"><title>{escape(said)}</title></circle>'
        )
        if p.port is not None:
            parts.append(_cross(x(p.x), y(p.port), "port-point", said))
    return parts


def _cross(cx: float, cy: float, kind: str, said: str = "") -> str:
    """The port's marker: an × that stays visible on top of HF's dot."""
    title = f"<title>{escape(said)}</title>" if said else ""
    path = f"M{cx - 4:.1f},{cy - 4:.1f}L{cx + 4:.1f},{cy + 4:.1f}M{cx - 4:.1f},{cy + 4:.1f}L{cx + 4:.1f},{cy - 4:.1f}"
    return f'<path class="{kind}" d="{path}" stroke="{PORT_COLOUR}" stroke-width="2.2" fill="none">{title}</path>'
