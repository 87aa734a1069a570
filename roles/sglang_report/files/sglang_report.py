"""The report of one run of playbooks/bench.yml or playbooks/report.yml: one self-contained HTML file.

    sglang_report.py DIR

reads ``DIR/bench.json`` (the benchmark's raw figures; absent after a plain report run) and ``DIR/timeline.json``
(the deployment's status file and load history), and writes ``DIR/report.html`` and ``DIR/summary.json`` (the
speed-up per concurrency and the crossover). The page has no script and loads nothing (inline CSS and SVG, a
Content-Security-Policy that allows neither): it opens from the file in any browser, offline. Every text a client,
a server or its log could influence is data: control characters are shown as ``\\xNN`` and everything is
HTML-escaped.

Speed-up at a concurrency = the speculative side's output tokens/s over the baseline's (speculation off).
Crossover = the first concurrency, in ascending order, where the speed-up is below 1.0: from there on speculative
decoding costs more than it gives.

Standard library only; runs on the controller (roles/sglang_report/tasks/main.yml).
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import sys

PHASES = ("launching", "loading_weights", "kv_cache", "cuda_graph", "warmup", "ready")
PHASE_WORDS = {"launching": "starting", "loading_weights": "loading weights", "kv_cache": "KV cache",
               "cuda_graph": "CUDA graphs", "warmup": "warm-up", "ready": "ready"}
PHASE_COLORS = {"launching": "#9aa5b1", "loading_weights": "#3b82c4", "kv_cache": "#7c5cc4", "cuda_graph": "#d9822b",
                "warmup": "#e0b400", "ready": "#2f9e44", "other": "#6b7280"}
SPEC_COLOR = "#d9480f"
BASE_COLOR = "#1c7ed6"
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ALL = re.compile("[\x00-\x1f\x7f-\x9f]")


# -- text ---------------------------------------------------------------------------------------------------------
def escape(text, keep_newlines=False):
    """Text for the page: control characters (C0 but newline/tab where kept, DEL, C1) as ``\\xNN``, then
    HTML-escaped (quotes too: safe in attributes). Anything that is not a string is shown as its ``str``."""
    if text is None:
        return ""
    if not isinstance(text, str):
        text = str(text)
    pattern = _CONTROL if keep_newlines else _CONTROL_ALL
    text = pattern.sub(lambda m: "\\x%02x" % ord(m.group()), text)
    return html.escape(text, quote=True)


def css_class(name):
    """A phase name as a CSS class (only known names; anything else is ``other``)."""
    return name if name in PHASE_COLORS else "other"


def num(value):
    """A finite float, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def fmt(value, digits=1):
    value = num(value)
    if value is None:
        return "-"
    return "{:,.{d}f}".format(value, d=digits)


# -- figures ------------------------------------------------------------------------------------------------------
def runs_by_side(bench):
    """{(side, concurrency): run} of the runs that have figures."""
    out = {}
    for run in (bench or {}).get("runs") or []:
        if not isinstance(run, dict) or not isinstance(run.get("figures"), dict):
            continue
        try:
            concurrency = int(run.get("concurrency"))
        except (TypeError, ValueError):
            continue
        out[(run.get("side"), concurrency)] = run
    return out


def speedups(bench):
    """One row per concurrency of the sweep, ascending: both sides' output tokens/s and the speed-up
    (speculative / baseline; None where a side has no figure)."""
    by = runs_by_side(bench)
    sweep = sorted({c for (side, c) in by} | {int(c) for c in (bench or {}).get("sweep") or [] if num(c) is not None})
    rows = []
    for c in sweep:
        spec = num(((by.get(("speculative", c)) or {}).get("figures") or {}).get("output_throughput"))
        base = num(((by.get(("baseline", c)) or {}).get("figures") or {}).get("output_throughput"))
        ratio = spec / base if spec is not None and base else None
        rows.append({"concurrency": c, "speculative_tok_s": spec, "baseline_tok_s": base, "speedup": ratio})
    return rows


def text_table(bench, rows, cross):
    """The sweep as text lines (the play prints them): per concurrency both sides' output tokens/s, the speed-up and
    the speculative side's accept length; the crossover last."""
    by = runs_by_side(bench)
    label = (bench or {}).get("label")
    lines = ["concurrency  speculative tok/s  off tok/s  speed-up  accept length%s"
             % ("  (%s)" % label if label else "")]
    for r in rows:
        accept = num(((by.get(("speculative", r["concurrency"])) or {}).get("figures") or {}).get("accept_length"))
        lines.append("%11d  %17s  %9s  %8s  %13s" % (
            r["concurrency"], fmt(r["speculative_tok_s"], 1), fmt(r["baseline_tok_s"], 1),
            "-" if r["speedup"] is None else "%.2fx" % r["speedup"], fmt(accept, 2)))
    lines.append("crossover: %s" % ("none" if cross is None else cross))
    return lines


def crossover(rows):
    """The first concurrency (rows ascending) whose speed-up is below 1.0, or None."""
    for row in rows:
        if row["speedup"] is not None and row["speedup"] < 1.0:
            return row["concurrency"]
    return None


def verdict_words(rows, cross):
    measured = [r for r in rows if r["speedup"] is not None]
    if not measured:
        return "No concurrency has figures on both sides: no speed-up to show."
    if cross is None:
        return ("Speculative decoding is faster at every concurrency measured (up to %d): no crossover in this sweep."
                % measured[-1]["concurrency"])
    if cross == measured[0]["concurrency"]:
        return ("Speculative decoding is slower already at concurrency %d, the lowest measured: it does not pay "
                "with this load." % cross)
    faster = [r["concurrency"] for r in measured if r["concurrency"] < cross]
    return ("Speculative decoding is faster up to concurrency %d and slower from concurrency %d on: the crossover."
            % (faster[-1], cross))


# -- SVG ----------------------------------------------------------------------------------------------------------
def nice_ticks(top, count=5):
    """Round tick values from 0 to at least ``top``."""
    if not top or top <= 0:
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks = [0.0]
    while ticks[-1] < top - step * 1e-9:
        ticks.append(round(len(ticks) * step, 10))
    return ticks


def _tick_text(value):
    return ("%g" % value) if value < 10000 else "{:,.0f}".format(value)


class Plot:
    """A chart frame: categorical x (the concurrencies), linear y from 0; SVG element strings."""

    def __init__(self, categories, top, width=640, height=300, left=64, right=20, top_pad=30, bottom=48):
        self.categories = list(categories)
        self.ticks = nice_ticks(top)
        self.ymax = self.ticks[-1]
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = left, right, top_pad, bottom
        self.plot_w = width - left - right
        self.plot_h = height - top_pad - bottom

    def x(self, index):
        return self.left + self.plot_w * (index + 0.5) / max(1, len(self.categories))

    def band(self):
        return self.plot_w / max(1, len(self.categories))

    def y(self, value):
        return self.top + self.plot_h * (1.0 - min(value, self.ymax) / self.ymax)

    def axes(self, x_title, y_title):
        parts = []
        for tick in self.ticks:
            y = self.y(tick)
            parts.append('<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>' % (self.left, self.left + self.plot_w, y, y))
            parts.append('<text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>' % (self.left - 6, y + 4, _tick_text(tick)))
        base = self.top + self.plot_h
        parts.append('<line class="axis" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>' % (self.left, self.left + self.plot_w, base, base))
        for i, cat in enumerate(self.categories):
            parts.append('<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>' % (self.x(i), base + 16, escape(cat)))
        parts.append('<text class="axis-title" x="%.1f" y="%.1f" text-anchor="middle">%s</text>'
                     % (self.left + self.plot_w / 2, self.height - 8, escape(x_title)))
        parts.append('<text class="axis-title" transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>'
                     % (self.top + self.plot_h / 2, escape(y_title)))
        return parts

    def svg(self, cls, title, parts):
        return ('<svg class="chart %s" role="img" aria-label="%s" viewBox="0 0 %d %d" width="%d" height="%d" '
                'xmlns="http://www.w3.org/2000/svg"><title>%s</title>%s</svg>'
                % (cls, escape(title), self.width, self.height, self.width, self.height, escape(title), "".join(parts)))


def speedup_chart(rows, cross, label):
    """Speed-up per concurrency: points joined by a line, the parity line at 1.0, the crossover marked."""
    tag = (" (%s)" % label) if label else ""
    values = [r["speedup"] for r in rows if r["speedup"] is not None]
    plot = Plot([r["concurrency"] for r in rows], max(values + [1.2]) * 1.15)
    parts = plot.axes("concurrency (requests in flight)", "speed-up" + tag)
    y1 = plot.y(1.0)
    parts.append('<rect class="loss-zone" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>'
                 % (plot.left, y1, plot.plot_w, plot.top + plot.plot_h - y1))
    parts.append('<line class="parity" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>' % (plot.left, plot.left + plot.plot_w, y1, y1))
    parts.append('<text class="parity-label" x="%.1f" y="%.1f" text-anchor="end">1.0 = no gain</text>'
                 % (plot.left + plot.plot_w - 4, y1 - 5))
    if cross is not None:
        i = [r["concurrency"] for r in rows].index(cross)
        x = plot.x(i)
        parts.append('<g class="crossover" data-concurrency="%d"><line class="crossover-line" x1="%.1f" x2="%.1f" '
                     'y1="%.1f" y2="%.1f"/><text class="crossover-label" x="%.1f" y="%.1f" text-anchor="middle">'
                     'crossover: concurrency %d</text></g>'
                     % (cross, x, x, plot.top, plot.top + plot.plot_h, x, plot.top - 10, cross))
    points = [(plot.x(i), plot.y(r["speedup"]), r) for i, r in enumerate(rows) if r["speedup"] is not None]
    if len(points) > 1:
        parts.append('<polyline class="speedup-line" points="%s"/>' % " ".join("%.1f,%.1f" % (x, y) for x, y, row in points))
    for x, y, r in points:
        cls = "speedup-point loss" if r["speedup"] < 1.0 else "speedup-point gain"
        parts.append('<circle class="%s" data-concurrency="%d" data-speedup="%.4f" cx="%.1f" cy="%.1f" r="5">'
                     '<title>concurrency %d: speed-up %.2f%s</title></circle>'
                     % (cls, r["concurrency"], r["speedup"], x, y, r["concurrency"], r["speedup"], escape(tag)))
        parts.append('<text class="value" x="%.1f" y="%.1f" text-anchor="start">%.2f</text>' % (x + 8, y - 8, r["speedup"]))
    return plot.svg("speedup-chart", "Speed-up of speculative decoding per concurrency" + tag, parts)


def throughput_chart(rows, label):
    """Output tokens/s of both sides per concurrency: grouped bars."""
    tag = (" (%s)" % label) if label else ""
    values = [v for r in rows for v in (r["speculative_tok_s"], r["baseline_tok_s"]) if v is not None]
    plot = Plot([r["concurrency"] for r in rows], max(values + [1.0]) * 1.1)
    parts = plot.axes("concurrency (requests in flight)", "output tokens/s" + tag)
    width = min(36.0, plot.band() * 0.35)
    for i, r in enumerate(rows):
        for offset, key, cls, side in ((-width, "speculative_tok_s", "tps-spec", "speculative"),
                                       (0.0, "baseline_tok_s", "tps-baseline", "speculation off")):
            value = r[key]
            if value is None:
                continue
            x, y = plot.x(i) + offset, plot.y(value)
            parts.append('<rect class="%s" data-concurrency="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f">'
                         '<title>%s, concurrency %d: %s output tokens/s%s</title></rect>'
                         % (cls, r["concurrency"], x, y, width, plot.top + plot.plot_h - y, side, r["concurrency"],
                            fmt(value), escape(tag)))
    legend_y = plot.top - 14
    parts.append('<rect class="tps-spec" x="%.1f" y="%.1f" width="12" height="12"/><text class="legend" x="%.1f" y="%.1f">'
                 'speculative (EAGLE-3 on)</text>' % (plot.left, legend_y - 10, plot.left + 16, legend_y))
    parts.append('<rect class="tps-baseline" x="%.1f" y="%.1f" width="12" height="12"/><text class="legend" x="%.1f" y="%.1f">'
                 'speculation off</text>' % (plot.left + 200, legend_y - 10, plot.left + 216, legend_y))
    return plot.svg("throughput-chart", "Output tokens per second, both sides" + tag, parts)


# -- the load timeline --------------------------------------------------------------------------------------------
def phase_spans(phases, end):
    """[(phase, start, end)] from [{phase, at}] (seconds since launch) up to ``end``."""
    marks = []
    for p in phases or []:
        if isinstance(p, dict) and isinstance(p.get("phase"), str) and num(p.get("at", p.get("elapsed"))) is not None:
            marks.append((p["phase"], num(p.get("at", p.get("elapsed")))))
    marks.sort(key=lambda m: m[1])
    spans = []
    for i, (phase, start) in enumerate(marks):
        stop = marks[i + 1][1] if i + 1 < len(marks) else end
        if stop is None or stop < start:
            stop = start
        spans.append((phase, start, stop))
    return spans


def this_load(status):
    """The status file's load: {attempt, verdict, total, spans, failed} or None."""
    if not isinstance(status, dict) or not status.get("phases"):
        return None
    report = status.get("report") if isinstance(status.get("report"), dict) else {}
    total = num(status.get("ready_after")) or num(report.get("elapsed"))
    if total is None and num(status.get("updated")) is not None and num(status.get("started_at")) is not None:
        total = num(status["updated"]) - num(status["started_at"])
    spans = phase_spans(status.get("phases"), total)
    if total is None:
        total = spans[-1][2] if spans else 0.0
    verdict = status.get("verdict")
    return {"attempt": status.get("attempt"), "verdict": verdict, "total": total, "spans": spans,
            "failed": verdict not in (None, "ready", "stopped"), "current": True}


def earlier_loads(loads, current_attempt):
    out = []
    for rec in loads or []:
        if not isinstance(rec, dict) or num(rec.get("total")) is None:
            continue
        if current_attempt is not None and rec.get("attempt") == current_attempt:
            continue
        out.append({"attempt": rec.get("attempt"), "verdict": "ready", "total": num(rec["total"]),
                    "spans": phase_spans(rec.get("phases"), num(rec["total"])), "failed": False, "current": False,
                    "finished_at": num(rec.get("finished_at"))})
    return out


def timeline_chart(loads):
    """One horizontal bar per load (this one first, then the earlier ones, newest first), split by phase."""
    top = max([l["total"] for l in loads] + [1.0])
    ticks = nice_ticks(top)
    xmax = ticks[-1]
    left, right, row_h, pad = 170, 120, 26, 36
    width = 760
    plot_w = width - left - right
    height = pad + row_h * len(loads) + 56

    def xs(seconds):
        return left + plot_w * min(seconds, xmax) / xmax

    parts = []
    for t in ticks:
        parts.append('<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/>' % (xs(t), xs(t), pad - 6, pad + row_h * len(loads)))
        parts.append('<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>' % (xs(t), pad + row_h * len(loads) + 16, _tick_text(t)))
    parts.append('<text class="axis-title" x="%.1f" y="%d" text-anchor="middle">seconds since launch</text>'
                 % (left + plot_w / 2, height - 22))
    for row, load in enumerate(loads):
        y = pad + row * row_h
        name = "attempt %s" % escape(load["attempt"]) if load["attempt"] is not None else "a load"
        name += " (this load)" if load["current"] else ""
        name += (" (%s)" % escape(load["note"])) if load.get("note") else ""
        cls = "load-bar current" if load["current"] else "load-bar"
        if load["failed"]:
            cls += " failed"
        parts.append('<g class="%s" data-attempt="%s" data-total="%.3f"><text class="load-label" x="%d" y="%.1f" '
                     'text-anchor="end">%s</text>' % (cls, escape(load["attempt"]), load["total"], left - 8, y + 15, name))
        for phase, start, stop in load["spans"]:
            w = max(xs(stop) - xs(start), 1.0)
            parts.append('<rect class="phase-seg phase-%s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s: %.1f s'
                         '-%.1f s</title></rect>'
                         % (css_class(phase), xs(start), y + 3, w, row_h - 8, escape(PHASE_WORDS.get(phase, phase)),
                            start, stop))
        end = '%s %s' % (fmt(load["total"]), "s")
        if load["failed"]:
            end += " - failed: %s" % escape(load["verdict"])
        parts.append('<text class="load-end" x="%.1f" y="%.1f">%s</text></g>' % (xs(load["total"]) + 4, y + 15, end))
    legend_x = 10
    for phase in PHASES:
        parts.append('<rect class="phase-seg phase-%s" x="%d" y="6" width="12" height="12"/><text class="legend" x="%d" y="16">%s</text>'
                     % (phase, legend_x, legend_x + 16, escape(PHASE_WORDS[phase])))
        legend_x += 16 + 7 * len(PHASE_WORDS[phase]) + 18
    return ('<svg class="chart timeline-chart" role="img" aria-label="Load timeline" viewBox="0 0 %d %d" width="%d" '
            'height="%d" xmlns="http://www.w3.org/2000/svg"><title>Load timeline</title>%s</svg>'
            % (width, height, width, height, "".join(parts)))


# -- the page -----------------------------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2933;margin:24px auto;max-width:1100px;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d9dee3;padding-bottom:4px}
.meta{color:#52606d}.label-banner{background:#fff3bf;border:1px solid #e8c547;padding:8px 12px;margin:12px 0;font-weight:600}
.verdict{font-size:16px;font-weight:600;margin:8px 0}.note{color:#52606d}
table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d9dee3;padding:3px 6px;text-align:right}table.figures{font-size:12px}th{background:#f5f7fa}td.text{text-align:left}
td.loss{color:#c92a2a;font-weight:600}td.gain{color:#2b8a3e;font-weight:600}
.chart{display:block;margin:8px 0;max-width:100%%;height:auto}
.grid{stroke:#e4e7eb;stroke-width:1}.axis{stroke:#7b8794;stroke-width:1}
.tick{font-size:11px;fill:#52606d}.axis-title{font-size:12px;fill:#323f4b}.legend{font-size:12px;fill:#323f4b}
.value{font-size:11px;fill:#323f4b}.parity{stroke:#323f4b;stroke-dasharray:6 4;stroke-width:1.5}
.parity-label{font-size:11px;fill:#323f4b}.loss-zone{fill:#fff5f5}
.speedup-line{fill:none;stroke:#495057;stroke-width:2}.speedup-point.gain{fill:#2b8a3e}.speedup-point.loss{fill:#c92a2a}
.crossover-line{stroke:#c92a2a;stroke-width:2;stroke-dasharray:4 3}.crossover-label{font-size:12px;font-weight:600;fill:#c92a2a}
.tps-spec{fill:%s}.tps-baseline{fill:%s}
.load-label{font-size:12px;fill:#323f4b}.load-bar.current .load-label{font-weight:700}.load-end{font-size:11px;fill:#52606d}
.load-bar.failed .load-end{fill:#c92a2a;font-weight:600}
pre{background:#f5f7fa;border:1px solid #d9dee3;padding:8px;overflow:auto;font-size:12px;white-space:pre-wrap;word-break:break-all}
.failure{border:2px solid #c92a2a;padding:8px 12px;background:#fff5f5}
""" % (SPEC_COLOR, BASE_COLOR) + "".join(".phase-%s{fill:%s}" % (k, v) for k, v in PHASE_COLORS.items())


def figures_table(bench, label):
    tag = (" (%s)" % escape(label)) if label else ""
    rows = []
    for run in sorted((bench or {}).get("runs") or [], key=lambda r: (num(r.get("concurrency")) or 0, r.get("side") != "speculative")):
        if not isinstance(run, dict):
            continue
        f = run.get("figures") if isinstance(run.get("figures"), dict) else {}
        state = "ok" if run.get("ok") else "failed: " + (run.get("error") or "no figures")
        rows.append("<tr class=\"run\" data-side=\"%s\" data-concurrency=\"%s\"><td class=\"text\">%s</td><td>%s</td>"
                    "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
                    "<td class=\"text\">%s</td></tr>"
                    % (escape(run.get("side")), escape(run.get("concurrency")), escape(run.get("side")),
                       escape(run.get("concurrency")), fmt(f.get("output_throughput")), fmt(f.get("request_throughput"), 2),
                       fmt(f.get("median_ttft_ms")), fmt(f.get("p99_ttft_ms")), fmt(f.get("median_itl_ms"), 2),
                       fmt(f.get("p99_itl_ms"), 2), fmt(f.get("accept_length"), 2), escape(f.get("completed")),
                       escape(state)))
    head = ("<tr><th>side</th><th>concurrency</th><th>output tok/s%s</th><th>requests/s%s</th><th>TTFT p50 ms%s</th>"
            "<th>TTFT p99 ms%s</th><th>ITL p50 ms%s</th><th>ITL p99 ms%s</th><th>accept length%s</th>"
            "<th>completed</th><th>run</th></tr>") % ((tag,) * 7)
    return '<table class="figures">%s%s</table>' % (head, "".join(rows))


def speedup_table(rows, label):
    tag = (" (%s)" % escape(label)) if label else ""
    body = []
    for r in rows:
        cls = "" if r["speedup"] is None else ("loss" if r["speedup"] < 1.0 else "gain")
        body.append('<tr class="speedup-row" data-concurrency="%d"><td>%d</td><td>%s</td><td>%s</td><td class="%s">%s</td></tr>'
                    % (r["concurrency"], r["concurrency"], fmt(r["speculative_tok_s"]), fmt(r["baseline_tok_s"]), cls,
                       fmt(r["speedup"], 2) + ("x" if r["speedup"] is not None else "")))
    return ('<table class="speedups"><tr><th>concurrency</th><th>speculative tok/s%s</th><th>speculation off tok/s%s</th>'
            '<th>speed-up%s</th></tr>%s</table>' % (tag, tag, tag, "".join(body)))


def failure_section(status):
    report = status.get("report") if isinstance(status.get("report"), dict) else {}
    lines = report.get("traceback") or []
    if isinstance(lines, str):
        lines = lines.splitlines()
    tail = report.get("log_tail") or []
    if isinstance(tail, str):
        tail = tail.splitlines()
    parts = ['<section class="failure"><h2>The last load failed</h2>',
             '<p>crash class: <b class="crash-class">%s</b>%s</p>'
             % (escape(status.get("verdict")), " (class uncertain)" if report.get("class_uncertain") else ""),
             '<p>hint: <span class="hint">%s</span></p>' % escape(report.get("hint")),
             '<p>evidence: %s</p>' % escape(report.get("evidence")),
             '<p>deciding line %s:</p><pre class="deciding-line">%s</pre>' % (escape(report.get("deciding_lineno")),
                                                                              escape(report.get("deciding_line")))]
    if lines:
        parts.append('<p>traceback:</p><pre class="traceback">%s</pre>'
                     % "\n".join(escape(l) for l in lines if isinstance(l, str)))
    parts.append('<p>log excerpt (%s):</p><pre class="log-tail">%s</pre>'
                 % (escape(report.get("log_path") or status.get("log_path")),
                    "\n".join(escape(l) for l in tail if isinstance(l, str))))
    parts.append("</section>")
    return "".join(parts)


def timeline_section(timeline, notes=None):
    """The load timeline: this load (the status file) and the earlier ones (the history); ``notes`` {attempt: words}
    name what a load was for (the benchmark's baseline)."""
    notes = notes or {}
    status = (timeline or {}).get("status")
    current = this_load(status)
    earlier = earlier_loads((timeline or {}).get("loads"), current["attempt"] if current else None)
    loads = ([current] if current else []) + list(reversed(earlier))
    parts = ["<h2>Load timeline</h2>"]
    if not loads:
        parts.append('<p class="no-loads">No load recorded in the run dir yet (%s).</p>'
                     % escape((timeline or {}).get("status_error") or "no status file"))
        return "".join(parts)
    for load in loads:
        load["note"] = notes.get(load["attempt"])
    if current:
        parts.append('<p>This load: attempt %s, %s after %s s (phase %s).</p>'
                     % (escape(current["attempt"]), escape(status.get("verdict") or "still loading"),
                        fmt(current["total"]), escape(status.get("phase"))))
    parts.append(timeline_chart(loads))
    head = "".join("<th>%s</th>" % escape(PHASE_WORDS[p]) for p in PHASES)
    body = []
    for load in loads:
        at = {phase: start for phase, start, stop in load["spans"]}
        body.append("<tr><td class=\"text\">%s%s%s</td>%s<td>%s</td></tr>"
                    % (escape(load["attempt"]), " (this load)" if load["current"] else "",
                       (" (%s)" % escape(load["note"])) if load.get("note") else "",
                       "".join("<td>%s</td>" % fmt(at.get(p)) for p in PHASES), fmt(load["total"])))
    parts.append('<table class="phases"><tr><th>attempt</th>%s<th>total s</th></tr>%s</table>'
                 % (head, "".join(body)))
    parts.append("<p class=\"note\">Each cell: seconds after the launch at which the phase began.</p>")
    if current and current["failed"]:
        parts.append(failure_section(status))
    return "".join(parts)


def bench_section(bench, rows, cross):
    label = bench.get("label") or ""
    dep = bench.get("deployment") if isinstance(bench.get("deployment"), dict) else {}
    client = bench.get("client") if isinstance(bench.get("client"), dict) else {}
    parts = ["<h2>Does EAGLE-3 pay here?</h2>"]
    parts.append('<p class="verdict">%s</p>' % escape(verdict_words(rows, cross)))
    parts.append(speedup_chart(rows, cross, label))
    parts.append('<p class="note">How to read it: above the dashed line (1.0) speculative decoding gives more output '
                 'tokens per second than the same server with speculation off; below it, it costs more than it gives. '
                 'The crossover is the first concurrency below the line.</p>')
    parts.append(throughput_chart(rows, label))
    parts.append(speedup_table(rows, label))
    parts.append(figures_table(bench, label))
    parts.append('<p class="note">SGLang\'s own client (%s), dataset %s, input %s and output %s tokens, seed %s; each run '
                 'flushes the cache after its warm-up, so the accept length (SGLang\'s avg_spec_accept_length) counts that '
                 'run only. Speculative settings: %s. The deployment\'s fingerprint before %s, after %s.</p>'
                 % (escape(client.get("module")), escape(client.get("dataset")), escape(client.get("input_len")),
                    escape(client.get("output_len")), escape(client.get("seed")), escape(json.dumps(dep.get("speculative"))),
                    escape((dep.get("fingerprint_before") or "-")[:16]), escape((dep.get("fingerprint_after") or "-")[:16])))
    return "".join(parts)


def render(bench, timeline):
    """(report.html text, summary dict)."""
    bench = bench if isinstance(bench, dict) else None
    rows = speedups(bench) if bench else []
    cross = crossover(rows)
    label = (bench or {}).get("label") or ""
    note = (bench or {}).get("note") or ""
    host = (bench or timeline or {}).get("host")
    when = (bench or timeline or {}).get("time")
    body = ["<h1>eagle-deploy report: %s</h1>" % escape(host),
            '<p class="meta">%s, deployment %s</p>' % (escape(when), escape((timeline or {}).get("name")))]
    if label:
        body.append('<p class="label-banner">Every figure on this page is labelled <span class="label">%s</span>%s</p>'
                    % (escape(label), (": " + escape(note)) if note else ""))
    elif note:
        body.append('<p class="note">%s</p>' % escape(note))
    if bench:
        body.append(bench_section(bench, rows, cross))
    dep = (bench or {}).get("deployment") if isinstance((bench or {}).get("deployment"), dict) else {}
    notes = {dep.get("baseline_attempt"): "baseline"} if dep.get("baseline_attempt") is not None else {}
    body.append(timeline_section(timeline, notes))
    page = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<title>eagle-deploy report: %s</title><style>%s</style></head><body>%s</body></html>\n'
            % (escape(host), CSS, "".join(body)))
    status = (timeline or {}).get("status") if isinstance((timeline or {}).get("status"), dict) else {}
    summary = {"host": host, "time": when, "label": label or None, "rows": rows, "crossover": cross,
               "verdict": verdict_words(rows, cross) if bench else None,
               "load": {"attempt": status.get("attempt"), "verdict": status.get("verdict")} if status else None}
    return page, summary


def _load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: sglang_report.py DIR\n")
        return 2
    out = argv[0]
    bench = _load(os.path.join(out, "bench.json"))
    page, summary = render(bench, _load(os.path.join(out, "timeline.json")))
    with open(os.path.join(out, "report.html"), "w", encoding="utf-8") as handle:
        handle.write(page)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(json.dumps({"report": os.path.join(out, "report.html"), "crossover": summary["crossover"],
                      "verdict": summary["verdict"],
                      "table": text_table(bench, summary["rows"], summary["crossover"]) if bench else []}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
