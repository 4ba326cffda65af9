"""The topology page's drawing: components as boxes in columns by depth (spouts first), one
edge per subscription labelled with its grouping, live counts in each box, and each bolt
coloured by its capacity. Inline SVG, built on the server: no script, nothing fetched."""

from __future__ import annotations

from typing import Any

from .pages import esc

BOX_W, BOX_H, COL_GAP, ROW_GAP, PAD = 190, 64, 110, 26, 16
# capacity -> fill: idle/low, busy, near the bottleneck; grey when not measured (spouts, no data yet)
COLOURS = ((0.5, "#c6f6d5"), (0.8, "#fefcbf"), (float("inf"), "#fed7d7"))
UNMEASURED = "#edf2f7"


def capacity_colour(capacity: float | None) -> str:
    if capacity is None:
        return UNMEASURED
    return next(colour for limit, colour in COLOURS if capacity < limit)


def _depths(graph: list[dict[str, Any]]) -> dict[str, int]:
    """Spouts at 0, a bolt one past its deepest source (cycles cut at the first visit)."""
    inputs = {c["id"]: [i["source"] for i in c.get("inputs") or [] if not str(i.get("stream", "")).startswith("$")]
              for c in graph}
    depth: dict[str, int] = {}

    def visit(cid: str, seen: frozenset) -> int:
        if cid in depth:
            return depth[cid]
        sources = [s for s in inputs.get(cid, []) if s in inputs and s not in seen]
        d = 0 if not sources else 1 + max(visit(s, seen | {cid}) for s in sources)
        depth[cid] = d
        return d
    for c in graph:
        visit(c["id"], frozenset())
    return depth


def svg_graph(graph: list[dict[str, Any]], components: dict[str, dict], parallelism: dict[str, int]) -> str:
    """The drawing, or a note when the run recorded no graph (runs of earlier versions)."""
    if not graph:
        return '<p class="muted" data-testid="graph-none">This run recorded no topology graph.</p>'
    depth = _depths(graph)
    columns: dict[int, list[str]] = {}
    for c in graph:
        columns.setdefault(depth[c["id"]], []).append(c["id"])
    pos = {cid: (PAD + d * (BOX_W + COL_GAP), PAD + r * (BOX_H + ROW_GAP))
           for d, ids in columns.items() for r, cid in enumerate(ids)}
    width = PAD * 2 + (max(columns) + 1) * BOX_W + max(columns) * COL_GAP
    height = PAD * 2 + max(len(ids) for ids in columns.values()) * (BOX_H + ROW_GAP) - ROW_GAP
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" data-testid="topology-graph" role="img" '
             f'aria-label="topology graph" width="{width}" height="{height + 14}" viewBox="0 0 {width} {height + 14}" '
             f'font-family="sans-serif" font-size="12">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#4a5568"/></marker></defs>']
    for c in graph:
        tx, ty = pos[c["id"]]
        for i in c.get("inputs") or []:
            if str(i.get("stream", "")).startswith("$") or i["source"] not in pos:
                continue
            sx, sy = pos[i["source"]]
            x1, y1, x2, y2 = float(sx + BOX_W), sy + BOX_H / 2, float(tx), ty + BOX_H / 2
            if x2 <= x1:  # a back edge (a cycle): route it under the boxes
                x1, y1, x2, y2 = sx + BOX_W / 2, sy + BOX_H, tx + BOX_W / 2, ty + BOX_H
            label = i["grouping"] + (f"({', '.join(i['fields'])})" if i.get("fields") else "")
            if i.get("stream", "default") != "default":
                label = f"{i['stream']}: {label}"
            parts.append(f'<g data-edge="{esc(i["source"])}->{esc(c["id"])}"><line x1="{x1:.0f}" y1="{y1:.0f}" '
                         f'x2="{x2:.0f}" y2="{y2:.0f}" stroke="#4a5568" marker-end="url(#arrow)"/>'
                         f'<text x="{(x1 + x2) / 2:.0f}" y="{(y1 + y2) / 2 - 5:.0f}" text-anchor="middle" '
                         f'fill="#2d3748">{esc(label[:40])}</text></g>')
    for c in graph:
        x, y = pos[c["id"]]
        figures = components.get(c["id"]) or {}
        cap = None if c.get("spout") else figures.get("capacity")
        n = parallelism.get(c["id"], c.get("parallelism", 1))
        kind = "spout" if c.get("spout") else "bolt"
        counts = (f"emitted {figures.get('emitted', 0):,}" if c.get("spout")
                  else f"executed {figures.get('executed', 0):,}")
        cap_text = "" if cap is None else f" · capacity {cap:.2f}"
        parts.append(
            f'<g data-component="{esc(c["id"])}" data-capacity="{"" if cap is None else cap}">'
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{capacity_colour(cap)}" '
            f'stroke="#2d3748"/>'
            f'<text x="{x + 8}" y="{y + 18}" font-weight="bold">{esc(c["id"][:26])}</text>'
            f'<text x="{x + 8}" y="{y + 36}" fill="#4a5568">{kind} × {n}{esc(cap_text)}</text>'
            f'<text x="{x + 8}" y="{y + 53}" fill="#2d3748">{esc(counts)}</text></g>')
    legend_y = height + 10
    parts.append(f'<text x="{PAD}" y="{legend_y}" fill="#4a5568">bolt colour: capacity &lt; 0.5 green, '
                 f'&lt; 0.8 yellow, else red (the bottleneck); grey: not measured</text></svg>')
    return "".join(parts)
