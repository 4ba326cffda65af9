"""HTML building blocks of the topology status pages (``app.py`` serves them): escaping and
number formats, the page frame and its CSS, and the throughput/latency charts as inline SVG
whose left margin fits the widest axis label. Pure functions: no Redis, no Airflow."""

from __future__ import annotations

import html
import math
import time
from typing import Any

REFRESH_SECS = 10  # the pages reload themselves this often


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{value:,}" if isinstance(value, int) else esc(value)


def _cut(value: Any, cls: str = "t") -> str:
    """A text cell's content that may be long (ids, hosts, DAG run ids): shown cut to the
    column's width with an ellipsis (CSS), the whole text in the tooltip."""
    text = "" if value is None else str(value)
    return f'<span class="{cls}" title="{esc(text)}">{esc(text)}</span>'


def axis_label(value: float) -> str:
    """A chart's axis value, compact, three significant digits at most: 0, 0.25, 12.5, 950,
    1.2k, 60k, 112k, 1.5M, 2G."""
    a = abs(value)
    if a == 0 or not math.isfinite(value):
        return "0" if a == 0 else str(value)
    unit = min(max(math.floor(math.log10(a) / 3), 0), 4)  # 0: below 1000, 1: k, 2: M, 3: G, 4: T
    text = f"{value / 1000 ** unit:.3g}"
    if abs(float(text)) >= 1000 and unit < 4:  # 999,500 rounds to 1000k: say 1M
        unit += 1
        text = f"{value / 1000 ** unit:.3g}"
    return text + ("", "k", "M", "G", "T")[unit]


def nice_max(value: float) -> float:
    """The axis top for data up to ``value``: the next of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8
    times a power of ten, so the labels (top, half, 0) are round numbers."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    base = 10.0 ** math.floor(math.log10(value))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * base >= value * (1 - 1e-9):
            return m * base
    return 10 * base  # not reached


# Glyph advance at the charts' 10 px sans-serif, rounded up: digits are 5.5-5.6 px in the usual
# UI fonts (Segoe UI, Roboto, Helvetica, Arial) and 6.4 px in DejaVu Sans, the widest common one.
# An upper bound, so a margin computed from it is enough.
_GLYPH_PX = {".": 3.3, ",": 3.3, "-": 4.0, "k": 6.0, "M": 9.0, "G": 8.0}


def label_width(text: str) -> float:
    """Upper bound of ``text``'s width in px at font-size 10 (digits 6.5 px)."""
    return sum(_GLYPH_PX.get(ch, 6.5) for ch in text)


def _ago(ts: Any, now: float, short: bool = False) -> str:
    if ts is None:
        return "–"
    secs = max(0.0, now - float(ts))
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(ts)))
    if secs >= 3600:
        return when
    return f'<span title="{when}">{secs:,.0f}s ago</span>' if short else f"{when} ({secs:,.0f}s ago)"


def _when(stamp: str | None) -> str:
    """``2026-11-22T22:10:40+0000`` -> ``2026-11-22 22:10:40`` (the record's own local time)."""
    return (stamp or "")[:19].replace("T", " ")


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1a202c;font-size:14px}
h1{font-size:20px;margin:0 0 8px;overflow-wrap:anywhere} h2{font-size:16px;margin:20px 0 6px}
.wide{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:4px 0 8px;max-width:100%}
th,td{border-bottom:1px solid #e2e8f0;padding:4px 6px;text-align:left;white-space:nowrap;vertical-align:top}
th{background:#f7fafc;font-weight:600;white-space:normal;vertical-align:bottom}
th.group{text-align:center;border-bottom:1px solid #cbd5e0} td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td.w{white-space:normal}
.t{display:inline-block;max-width:12em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom}
.t.s{max-width:7em}
@media (max-width:1100px){.opt{display:none}}
dd,li,p{overflow-wrap:anywhere} svg{max-width:100%;height:auto}
.state{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;background:#e2e8f0}
.state-running{background:#c6f6d5}.state-completed{background:#bee3f8}.state-failed,.state-lost{background:#fed7d7}
.state-killed{background:#feebc8}.state-paused{background:#e9d8fd}.muted{color:#718096}.err{color:#c53030}
pre{background:#f7fafc;border:1px solid #e2e8f0;padding:8px;overflow:auto;max-height:320px;font-size:12px}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:4px 0} dt{color:#4a5568} dd{margin:0}
.charts{display:flex;flex-wrap:wrap;gap:16px} a{color:#2b6cb0}
"""


def _page(title: str, body: str, refresh: bool) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECS}">' if refresh else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
            f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>")


def _state(state: str) -> str:
    return f'<span class="state state-{esc(state)}" data-testid="state">{esc(state)}</span>'


def svg_chart(title: str, points: list[dict[str, Any]], lines: list[tuple[str, str, str]], unit: str,
              width: int = 560, height: int = 170) -> str:
    """A small line chart as inline SVG (no scripts, no external assets): ``lines`` are
    (field, label, colour); samples where a field is None break that line."""
    pts = [p for p in points if any(p.get(f) is not None for f, _, _ in lines)]
    if not pts:
        return (f'<figure><figcaption>{esc(title)}</figcaption>'
                f'<p class="muted">no samples yet</p></figure>')
    top_value = max((float(p[f]) for p in pts for f, _, _ in lines if p.get(f) is not None), default=0.0)
    ymax = nice_max(top_value * 1.05)  # some room above the highest point
    ticks = [(frac, axis_label(frac * ymax)) for frac in (0.0, 0.5, 1.0)]
    # The y labels end 4 px left of the plot: the margin fits the widest of them (plus 4 px).
    left, right, top, bottom = max(24, math.ceil(max(label_width(t) for _, t in ticks)) + 8), 12, 10, 34
    t0, t1 = float(pts[0]["t"]), float(pts[-1]["t"])
    span = max(t1 - t0, 1e-6)
    w, h = width - left - right, height - top - bottom

    def xy(p: dict, f: str) -> str:
        x = left + (float(p["t"]) - t0) / span * w if len(pts) > 1 else left + w  # one point: at "now"
        return f"{x:.1f},{top + h - float(p[f]) / ymax * h:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" data-left="{left}" '
             f'aria-label="{esc(title)}" style="background:#fff;border:1px solid #e2e8f0">']
    for frac, label in ticks:  # horizontal grid with y labels
        y = top + h - frac * h
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + w}" y2="{y:.1f}" stroke="#edf2f7"/>')
        parts.append(f'<text class="y-label" x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end" '
                     f'fill="#4a5568">{esc(label)}</text>')
    if len(pts) > 1:
        parts.append(f'<text x="{left}" y="{height - 18}" font-size="10" fill="#4a5568">-{esc(_span(span))}</text>')
    parts.append(f'<text x="{left + w}" y="{height - 18}" font-size="10" text-anchor="end" fill="#4a5568">'
                 f'{esc(time.strftime("%H:%M:%S", time.localtime(t1)))}</text>')
    for f, label, colour in lines:
        segment: list[str] = []
        for p in pts + [{}]:  # the sentinel flushes the last segment
            if p.get(f) is not None:
                segment.append(xy(p, f))
                cx, cy = segment[-1].split(",")  # dots: short runs have few samples; exact value on hover
                when = time.strftime("%H:%M:%S", time.localtime(float(p["t"])))
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{esc(colour)}"><title>{esc(when)} '
                             f'{esc(label)} {esc(_num(p[f]))}</title></circle>')
                continue
            if len(segment) > 1:
                parts.append(f'<polyline fill="none" stroke="{esc(colour)}" stroke-width="1.6" '
                             f'points="{" ".join(segment)}"/>')
            segment = []
    x = left
    for _, label, colour in lines:  # legend
        parts.append(f'<rect x="{x}" y="{height - 11}" width="10" height="3" fill="{esc(colour)}"/>')
        parts.append(f'<text x="{x + 14}" y="{height - 6}" font-size="10" fill="#2d3748">{esc(label)}</text>')
        x += 26 + 6 * len(label)
    parts.append("</svg>")
    return f'<figure><figcaption>{esc(title)} ({esc(unit)})</figcaption>{"".join(parts)}</figure>'


def _span(secs: float) -> str:
    if secs >= 90:
        return f"{secs / 60:.1f} min"
    return f"{secs:.0f} s" if secs >= 10 else f"{secs:.1f} s"
