"""The geometry of a group's lag chart (an SVG the template draws): plain numbers, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from webui.formats import human_bytes, thousands
from webui.lag_history import LagSample


def _nice_ceiling(value: float) -> float:
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude  # pragma: no cover


def lag_chart(samples: Sequence[LagSample], now_s: float, *, span_s: float = 3600.0,
              width: int = 640, height: int = 200, unit: str = "bytes") -> dict[str, Any]:
    """Geometry of an SVG line chart of total lag over the last ``span_s`` seconds: numbers
    only, so the template needs no escaping decisions. ``unit``: "bytes" (0.7 groups) or
    "offsets" (Kafka clients' groups), for the axis labels."""
    left, right, top, bottom = 70, 10, 10, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    recent = [s for s in samples if now_s - s.time_s <= span_s]
    top_value = _nice_ceiling(max((s.total for s in recent), default=0))

    def x(t: float) -> float:
        return round(left + (t - (now_s - span_s)) / span_s * plot_w, 1)

    def y(v: float) -> float:
        return round(top + plot_h - v / top_value * plot_h, 1)

    label = human_bytes if unit == "bytes" else (lambda value: thousands(round(value)))
    points = " ".join(f"{x(s.time_s)},{y(s.total)}" for s in recent)
    y_ticks = [{"y": y(top_value * i / 4), "label": label(top_value * i / 4)} for i in range(5)]
    x_ticks = [{"x": x(now_s - span_s + span_s * i / 4),
                "label": f"-{int(span_s * (4 - i) / 4 / 60)} min" if i < 4 else "now"} for i in range(5)]
    return {"width": width, "height": height, "left": left, "top": top, "right": width - right,
            "bottom": top + plot_h, "points": points, "samples": len(recent),
            "last": recent[-1].total if recent else None,
            "dots": [{"x": x(s.time_s), "y": y(s.total)} for s in recent[-1:]],
            "y_ticks": y_ticks, "x_ticks": x_ticks}


# -- topics ---------------------------------------------------------------------------------
