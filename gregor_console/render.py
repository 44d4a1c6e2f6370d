"""The pages' Jinja2 environment (autoescaped) and the filters the templates use."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


def duration(ms: int | None) -> str:
    """A duration the way a person reads it: `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`."""
    if ms is None or ms < 0:
        return "–"
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def clock(ms: int | None) -> str:
    """A wall-clock time (UTC) of epoch milliseconds."""
    if ms is None or ms < 0:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + " UTC"


def number(value: int | None) -> str:
    return "–" if value is None or value < 0 else f"{value:,}"


def path_part(text: str) -> str:
    """`text` as one path segment of a URL."""
    return quote(text, safe="")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters.update(duration=duration, clock=clock, number=number, path_part=path_part)
    return env


def page(env: jinja2.Environment, template: str, context: dict[str, Any]) -> str:
    return env.get_template(template).render(context)
