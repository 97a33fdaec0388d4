"""The profiler's HTML page: one self-contained file (inline CSS and SVG, no scripts, no
network) with a timeline of every record, bars of the time per operation and the
summary table. Built from the JSON document of :meth:`Profiler.as_dict`."""

from __future__ import annotations

import html

from catalytic.profiler.runs import _fmt, summarize

#: at most this many records are drawn on the timeline and listed (the summary counts all)
MAX_DRAWN = 2000
_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac")
_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: right; }
th { border-bottom: 1px solid #888; } td.l, th.l { text-align: left; }
tr:nth-child(even) td { background: #f4f4f4; }
.note { color: #555; }
svg text { font: 11px system-ui, sans-serif; }
"""


def _e(value) -> str:
    """``value`` as HTML text or attribute value: every field of a profile file is
    untrusted (a file from elsewhere), so every one goes through here."""
    return html.escape(str(value), quote=True)


def _depths(records) -> dict:
    """Nesting depth of each record in its lane (iterative: chains of regions can be as
    deep as a recursion that was profiled)."""
    by_id = {r["id"]: r for r in records}
    depth: dict = {}
    for r in records:
        chain = []
        while r is not None and r["id"] not in depth:
            chain.append(r)
            p = by_id.get(r.get("parent"))
            # a parent in another thread's lane (a region that handed work to a pool)
            # does not push the record down in its own lane
            r = p if p is not None and str(p["thread"]) == str(r["thread"]) else None
        below = depth[r["id"]] + 1 if r is not None else 0
        for rec in reversed(chain):
            depth[rec["id"]] = below
            below += 1
    return depth


def _colour(name, colours) -> str:
    if name not in colours:
        colours[name] = _COLOURS[len(colours) % len(_COLOURS)]
    return colours[name]


def _label(r) -> str:
    bits = [r["name"], _fmt(r["wall_s"])]
    if r["kind"] == "op":
        bits.append(f"on {r['backend']}")
        if r.get("compile_s"):
            bits.append(f"of which Numba compiling {_fmt(r['compile_s'])}")
        if "predicted_s" in r:
            bits.append(f"predicted {_fmt(r['predicted_s'])}")
        if "device_s" in r:
            bits.append(f"device {_fmt(r['device_s'])}")
        if "reason" in r:
            bits.append(r["reason"])
    else:
        bits.append("region")
    if "error" in r:
        bits.append(f"raised {r['error']}")
    return " | ".join(bits)


def _timeline(records, colours) -> str:
    if not records:
        return "<p class='note'>No records.</p>"
    t0 = min(r["start_s"] for r in records)
    t1 = max(r["start_s"] + r["wall_s"] for r in records)
    span = max(t1 - t0, 1e-9)
    depth = _depths(records)
    width, left, row_h = 1100, 120, 18
    lanes = []
    for r in records:
        if str(r["thread"]) not in lanes:
            lanes.append(str(r["thread"]))
    lane_rows = {t: 1 + max(depth[r["id"]] for r in records if str(r["thread"]) == t)
                 for t in lanes}
    y0, tops = 20, {}
    for t in lanes:
        tops[t] = y0
        y0 += lane_rows[t] * row_h + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + left + 10}" '
             f'height="{y0 + 10}" role="img" aria-label="timeline">']
    parts.append(f'<text x="{left}" y="12">0</text><text x="{left + width - 60}" y="12">'
                 f'{_e(_fmt(span))}</text>')
    for t in lanes:
        parts.append(f'<text x="4" y="{tops[t] + 13}">thread {_e(t)}</text>')
    for r in records:
        x = left + (r["start_s"] - t0) / span * width
        w = max(r["wall_s"] / span * width, 1.0)
        y = tops[str(r["thread"])] + depth[r["id"]] * row_h
        fill = "#d0d0d0" if r["kind"] == "region" else _colour(r["name"], colours)
        label = _e(_label(r))
        parts.append(f'<g class="rec" data-name="{_e(r["name"])}">'
                     f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h - 3}" '
                     f'fill="{fill}" stroke="#555" stroke-width="0.3"><title>{label}</title>'
                     '</rect>')
        if w > 60:
            parts.append(f'<text x="{x + 3:.2f}" y="{y + 12}">{_e(r["name"])}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


#: the colour of Numba's compilation (its own bar, never an operation's)
COMPILE_COLOUR = "#9e9e9e"


def _bars(summary, colours) -> str:
    """Run time per operation, slowest first, and Numba's compilation in a bar of its
    own (its total over every operation) placed among them by its size."""
    ops = [(k, v["total_s"], v) for k, v in summary.items() if not k.startswith("[region]")]
    if not ops:
        return "<p class='note'>No operations were recorded.</p>"
    compiled = sum(v.get("compile_total_s", 0.0) for _, _, v in ops)
    calls = sum(v.get("compile_calls", 0) for _, _, v in ops)
    if compiled > 0:
        ops.append((None, compiled, {"count": calls}))
    ops.sort(key=lambda kv: -kv[1])
    top = ops[0][1] or 1e-12
    width, left, row_h = 700, 230, 22
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 160}" '
             f'height="{len(ops) * row_h + 10}" role="img" aria-label="time per operation">']
    for i, (name, total, v) in enumerate(ops):
        y = 5 + i * row_h
        w = max(total / top * width, 1.0)
        n = v["count"]
        label, fill, what = ((name, _colour(name, colours), "call") if name is not None
                             else ("Numba compilation", COMPILE_COLOUR, "compiling call"))
        parts.append(f'<g class="bar" data-name="{_e(label)}">'
                     f'<text x="4" y="{y + 14}">{_e(label)}</text>'
                     f'<rect x="{left}" y="{y}" width="{w:.2f}" height="{row_h - 6}" '
                     f'fill="{fill}"/>'
                     f'<text x="{left + w + 6:.2f}" y="{y + 14}">'
                     f'{_e(_fmt(total))} ({_e(n)} {what}{"s" if n != 1 else ""})</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _summary_table(summary) -> str:
    rows = sorted(summary.items(), key=lambda kv: -kv[1]["total_s"])
    out = ["<table><tr><th class='l'>operation / region</th><th>count</th><th>total</th>"
           "<th>mean</th><th>min</th><th>max</th><th>std</th><th>compile</th>"
           "<th class='l'>backends</th></tr>"]
    for k, v in rows:
        be = ", ".join(f"{_e(b)} &times;{_e(c)}" for b, c in v.get("backends", {}).items())
        out.append(f"<tr><td class='l'>{_e(k)}</td><td>{_e(v['count'])}</td>"
                   + "".join(f"<td>{_e(_fmt(v[f]))}</td>"
                             for f in ("total_s", "mean_s", "min_s", "max_s", "std_s"))
                   + (f"<td>{_e(_fmt(v['compile_total_s']))}</td>"
                      if "compile_total_s" in v else "<td>&ndash;</td>")
                   + f"<td class='l'>{be}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _records_table(records) -> str:
    out = ["<table><tr><th class='l'>kind</th><th class='l'>name</th><th>thread</th>"
           "<th>start</th><th>wall</th><th>compile</th><th class='l'>backend</th>"
           "<th>predicted</th>"
           "<th>device</th><th>host&rarr;device</th><th>device&rarr;host</th>"
           "<th class='l'>reason</th></tr>"]
    for r in records:
        def cell(key, fmt=_fmt):
            return f"<td>{_e(fmt(r[key]))}</td>" if key in r else "<td>&ndash;</td>"

        out.append(f"<tr><td class='l'>{_e(r['kind'])}</td><td class='l'>{_e(r['name'])}"
                   f"</td><td>{_e(str(r['thread']))}</td>{cell('start_s')}"
                   f"{cell('wall_s')}{cell('compile_s')}<td class='l'>{_e(r.get('backend', ''))}</td>"
                   f"{cell('predicted_s')}{cell('device_s')}"
                   f"{cell('h2d_bytes', lambda b: f'{b} B')}"
                   f"{cell('d2h_bytes', lambda b: f'{b} B')}"
                   f"<td class='l'>{_e(r.get('reason', ''))}</td></tr>")
    out.append("</table>")
    return "".join(out)


def html_report(doc: dict, title: str = "catalytic profile") -> str:
    """The page for a profile document (see :mod:`catalytic.profiler`); every field is
    escaped, but the document's types are trusted: check it first
    (:func:`catalytic.profiler.check_document`, which :func:`~catalytic.profiler.load`
    runs)."""
    records = doc["records"]
    drawn = sorted(records, key=lambda r: (r["start_s"], r["id"]))[:MAX_DRAWN]
    ops = sum(1 for r in records if r["kind"] == "op")
    return page(doc, drawn, summarize(records), len(records), ops, title)


def page(head: dict, drawn: list, summary: dict, n_records: int, n_ops: int,
         title: str = "catalytic profile") -> str:
    """The page from its parts: ``head`` (the document's ``created`` and ``machine``),
    ``drawn`` (the first records in start order, at most :data:`MAX_DRAWN`), the
    summary of all records, and how many records and operations there are."""
    colours: dict = {}
    machine = head.get("machine", {})
    about = ", ".join(f"{k} {v}" for k, v in machine.items())
    cut = (f"<p class='note'>{n_records} records; the first {len(drawn)} are drawn and "
           "listed, the summary counts all.</p>" if n_records > len(drawn) else "")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f"<p class='note'>Recorded {_e(str(head.get('created', '')))} on "
        f"{_e(about)}: {n_ops} operations, {n_records - n_ops} regions. Every "
        "figure was measured; a blank means it could not be measured here.</p>"
        f"{cut}<h2>Time per operation</h2><p class='note'>Run time (wall time less "
        "Numba compilation on the call's thread); compilation has its own bar and "
        "column, and is not counted in the operations' figures.</p>"
        f"{_bars(summary, colours)}"
        f"<h2>Timeline</h2><p class='note'>One lane per thread; regions in grey hold "
        "the operations below them. Hover a bar for its figures.</p>"
        f"{_timeline(drawn, colours)}<h2>Summary</h2>{_summary_table(summary)}"
        f"<h2>Records</h2>{_records_table(drawn)}</body></html>"
    )
