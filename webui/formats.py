"""The number and time formats of the console's pages (also its Jinja2 filters), and their
pagination."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

PAGE_SIZE = 50


def human_bytes(value: int | float | None) -> str:
    if value is None:
        return "unknown"
    value = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


def thousands(value: int | float | None) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def utc_time(ms: int | float | None) -> str:
    if ms is None:
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


# -- pagination -----------------------------------------------------------------------------


def paginate(items: Sequence, page: int, per_page: int = PAGE_SIZE) -> dict[str, Any]:
    """One page of ``items`` (pages count from 1; an out-of-range page is clamped)."""
    total = len(items)
    pages = max(1, math.ceil(total / per_page))
    page = min(max(page, 1), pages)
    return {"items": list(items[(page - 1) * per_page:page * per_page]), "page": page,
            "pages": pages, "total": total, "per_page": per_page}
