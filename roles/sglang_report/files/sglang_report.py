"""The report of one run of playbooks/bench.yml or playbooks/report.yml: one self-contained HTML file.

    sglang_report.py DIR

reads ``DIR/bench.json`` (the benchmark's raw figures; absent after a plain report run) and ``DIR/timeline.json``
(the deployment's status file and load history), and writes ``DIR/report.html`` and ``DIR/summary.json`` (the
speed-up per concurrency and the crossover). The page has no script and loads nothing (inline CSS and SVG, a
Content-Security-Policy that allows neither): it opens from the file in any browser, offline.

This program computes: the figures, the charts' geometry, what each section shows. The templates next to it draw:
``report.html.j2`` (the page) and ``report_charts.html.j2`` (its SVG charts), rendered by Jinja2 with autoescape on.
Every text a client, a server or its log could influence is data: each printed value goes through ``shown``
(control characters as ``\\xNN``), then Jinja2 HTML-escapes it (quotes too); data is never template source.

Each point (side, concurrency) has several runs: min/median/max of their output tokens/s. Speed-up at a
concurrency = the speculative side's median output tokens/s over the baseline's (speculation off); its range = the
slowest speculative run over the fastest baseline run up to the fastest over the slowest. A point's verdict is "pays"
or "does not pay" only where the whole range is on one side of 1.0, else "too close to call". Crossover = the first
concurrency, in ascending order, where the median speed-up is below 1.0; its interval from the verdicts: above the
highest concurrency up to which every point pays, at most the first that does not pay. The recommendation says
what to set (the batch-size threshold for speculation where the installed SGLang has one, else
--max-running-requests or a non-speculative replica beside it).

Runs on the controller (roles/sglang_report/tasks/main.yml, with the Python that runs ansible-playbook): the
standard library and Jinja2 (which ansible-core requires).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys

import jinja2
import markupsafe

TEMPLATES = os.path.dirname(os.path.abspath(__file__))
PAGE_TEMPLATE = "report.html.j2"
PHASES = ("launching", "loading_weights", "kv_cache", "cuda_graph", "warmup", "ready")
PHASE_WORDS = {"launching": "starting", "loading_weights": "loading weights", "kv_cache": "KV cache",
               "cuda_graph": "CUDA graphs", "warmup": "warm-up", "ready": "ready"}
PHASE_COLORS = {"launching": "#9aa5b1", "loading_weights": "#3b82c4", "kv_cache": "#7c5cc4", "cuda_graph": "#d9822b",
                "warmup": "#e0b400", "ready": "#2f9e44", "other": "#6b7280"}
# The figures of a run that the table of every run shows.
TABLE_FIGURES = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms",
                 "p99_itl_ms", "accept_length", "completed")
SPEC_COLOR = "#d9480f"
BASE_COLOR = "#1c7ed6"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


# -- text ---------------------------------------------------------------------------------------------------------
def shown(value):
    """A value as the page shows it (the templates' ``finalize``: every ``{{ }}``): None as nothing, anything not a
    string as its ``str``, control characters (C0, DEL, C1) as ``\\xNN``. Jinja2's autoescape HTML-escapes the
    result. Markup (a macro's output: the templates' own, already shown and escaped) passes unchanged."""
    if value is None:
        return ""
    if hasattr(value, "__html__"):
        return value
    if not isinstance(value, str):
        value = str(value)
    return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()), value)


def shown_lines(lines):
    """Lines as one block of text (a ``<pre>``'s): each line shown and escaped, joined by newlines."""
    return markupsafe.Markup("\n").join(shown(line) for line in lines)


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
    """A figure for the page: thousands separated, ``digits`` decimals; ``-`` for no figure."""
    value = num(value)
    if value is None:
        return "-"
    return "{:,.{d}f}".format(value, d=digits)


def fixed(value, digits=1):
    """A coordinate or a ratio with ``digits`` decimals."""
    return "%.*f" % (digits, value)


def tick_text(value):
    """An axis tick's words."""
    return ("%g" % value) if value < 10000 else "{:,.0f}".format(value)


def label_tag(label):
    """What every figure carries: `` (label)``, or nothing without a label."""
    return (" (%s)" % label) if label else ""


def environment():
    """The templates' Jinja2 environment: autoescape on, every printed value ``shown``, unknown names an error."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, finalize=shown,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters.update(lines=shown_lines, fmt=fmt, fixed=fixed, tick=tick_text)
    return env


# -- figures ------------------------------------------------------------------------------------------------------
VERDICT_PAYS, VERDICT_LOSES, VERDICT_CLOSE = "pays", "does not pay", "too close to call"
VERDICT_CLASSES = {VERDICT_PAYS: "pays", VERDICT_LOSES: "loses", VERDICT_CLOSE: "close"}


def counted(run):
    """Whether a run counts for its point: it has figures and is not a calibration run (one too short to count)."""
    return isinstance(run, dict) and isinstance(run.get("figures"), dict) and not run.get("calibration")


def runs_by_point(bench):
    """{(side, concurrency): [runs]} of the runs that count, in the order they ran."""
    out = {}
    for run in (bench or {}).get("runs") or []:
        if not counted(run):
            continue
        try:
            concurrency = int(run.get("concurrency"))
        except (TypeError, ValueError):
            continue
        out.setdefault((run.get("side"), concurrency), []).append(run)
    return out


def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2.0


def spread(values):
    """{min, median, max, n} of the numbers among ``values`` (None without any)."""
    values = [v for v in (num(x) for x in values) if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": median(values), "max": max(values), "n": len(values)}


def point_verdict(low, high):
    """A point's verdict from its speed-up range (the slowest speculative run over the fastest baseline run, and the
    other way round): given only where the whole range is on one side of 1.0."""
    if low is None or high is None:
        return None
    if low > 1.0:
        return VERDICT_PAYS
    if high < 1.0:
        return VERDICT_LOSES
    return VERDICT_CLOSE


def speedups(bench):
    """One row per concurrency of the sweep, ascending: both sides' output tokens/s over their runs (``speculative``,
    ``baseline``: min/median/max/n; ``speculative_tok_s``, ``baseline_tok_s``: the medians), the speed-up of the
    medians, its range (``speedup_low`` = slowest speculative / fastest baseline, ``speedup_high`` the other way
    round), the verdict, the speculative side's accept length (median). None where a side has no figure."""
    by = runs_by_point(bench)
    sweep = sorted({c for (side, c) in by} | {int(c) for c in (bench or {}).get("sweep") or [] if num(c) is not None})
    rows = []
    for c in sweep:
        spec = spread(((r.get("figures") or {}).get("output_throughput") for r in by.get(("speculative", c), [])))
        base = spread(((r.get("figures") or {}).get("output_throughput") for r in by.get(("baseline", c), [])))
        accept = spread(((r.get("figures") or {}).get("accept_length") for r in by.get(("speculative", c), [])))
        both = spec is not None and base is not None and base["min"] > 0
        low = spec["min"] / base["max"] if both else None
        high = spec["max"] / base["min"] if both else None
        rows.append({"concurrency": c, "speculative_tok_s": spec and spec["median"],
                     "baseline_tok_s": base and base["median"],
                     "speedup": spec["median"] / base["median"] if both else None,
                     "speculative": spec, "baseline": base, "speedup_low": low, "speedup_high": high,
                     "verdict": point_verdict(low, high), "accept_length": accept and accept["median"]})
    return rows


def crossover(rows):
    """The first concurrency (rows ascending) whose median speed-up is below 1.0, or None."""
    for row in rows:
        if row["speedup"] is not None and row["speedup"] < 1.0:
            return row["concurrency"]
    return None


def crossover_interval(rows):
    """Where speculation stops paying, as far as the verdicts tell: ``above`` = the highest concurrency up to which
    every point measured pays (None where the lowest does not), ``at_most`` = the first concurrency where it does not
    pay (None where none), ``close`` = the points too close to call; ``words`` says it."""
    measured = [r for r in rows if r["verdict"]]
    above = None
    for r in measured:
        if r["verdict"] != VERDICT_PAYS:
            break
        above = r["concurrency"]
    at_most = next((r["concurrency"] for r in measured if r["verdict"] == VERDICT_LOSES), None)
    close = [r["concurrency"] for r in measured if r["verdict"] == VERDICT_CLOSE
             and (above is None or r["concurrency"] > above) and (at_most is None or r["concurrency"] < at_most)]
    if not measured:
        words = "none: no concurrency has figures on both sides"
    elif at_most is None and above == measured[-1]["concurrency"]:
        words = "none up to %d: speculation pays at every concurrency measured" % above
    elif at_most is None:
        words = ("above %d: speculation pays up to %d, and the sweep cannot tell from there on" % (above, above)
                 if above is not None else "unknown: no concurrency measured where speculation clearly pays or "
                 "clearly does not")
    elif above is None:
        words = "at or below %d: speculation does not pay from %d on%s" % (
            at_most, at_most, "" if at_most == measured[0]["concurrency"] else
            ", and no lower concurrency clearly pays")
    else:
        words = "between %d and %d: speculation pays at %d, does not pay at %d" % (above, at_most, above, at_most)
    if close and measured:
        words += " (too close to call at %s)" % ", ".join(str(c) for c in close)
    return {"above": above, "at_most": at_most, "close": close, "words": words}


def recommendation(rows, interval, advice):
    """What an operator sets, from the verdicts: ``advice`` is the benchmark's ``recommend`` (the batch-size
    threshold option and whether the installed SGLang accepts it; the data-parallel size)."""
    advice = advice if isinstance(advice, dict) else {}
    measured = [r for r in rows if r["verdict"]]
    if not measured:
        return None
    above, at_most = interval["above"], interval["at_most"]
    if above is None and at_most is None:
        return ("No concurrency measured where speculative decoding clearly pays or clearly costs: run the benchmark "
                "with more repeats or longer runs (sglang_bench_repeats, sglang_bench_min_seconds) before changing "
                "anything.")
    if above is None:
        if at_most == measured[0]["concurrency"]:
            return ("Speculative decoding does not pay at any concurrency measured, from %d on: serve without it "
                    "(sglang_server_speculative_algorithm unset), unless lower loads than %d matter." % (at_most, at_most))
        return ("No concurrency measured where speculative decoding clearly pays, and it does not pay from %d on: "
                "serve without it, or measure the lower concurrencies with more repeats." % at_most)
    if at_most is None and above == measured[-1]["concurrency"]:
        return ("Keep speculative decoding on: it pays at every concurrency measured, up to %d. Measure higher "
                "concurrencies if the server sees more requests in flight." % above)
    option = advice.get("threshold_option")
    dp = max(1, int(num(advice.get("dp_size")) or 1))
    head = "Speculative decoding pays up to concurrency %d" % above
    head += (" and does not pay from %d on. " % at_most) if at_most is not None else "; above it the sweep cannot tell. "
    if option and advice.get("threshold_accepted"):
        value = above // dp + 1
        return head + ("Set --%s %d (sglang_server_extra_args: {\"%s\": %d}): the server then decodes without "
                       "speculation once a batch holds %d requests or more%s." % (
                           option, value, option, value, value,
                           (" (a batch of one of the %d data-parallel ranks: %d requests in flight in all)" % (dp, above))
                           if dp > 1 else ""))
    why = ("the installed SGLang has no batch-size threshold for speculation (it does not accept --%s)" % option
           if option and advice.get("threshold_accepted") is False else
           "no batch-size threshold for speculation was checked" if not option else
           "whether the installed SGLang accepts --%s was not checked" % option)
    return head + ("Since %s: cap the running batch with --max-running-requests %d (sglang_server_extra_args; "
                   "requests beyond it wait in the queue), or run a non-speculative replica beside this one and send "
                   "it the load above %d requests in flight." % (why, above, above))


def bench_advice(bench):
    """The benchmark's ``recommend`` (the threshold option, whether the installed SGLang accepts it), with the
    data-parallel size the speculative runs' /server_info gave."""
    out = dict((bench or {}).get("recommend") or {}) if isinstance((bench or {}).get("recommend"), dict) else {}
    for run in (bench or {}).get("runs") or []:
        if isinstance(run, dict) and run.get("side") == "speculative" and isinstance(run.get("server"), dict):
            if num(run["server"].get("dp_size")) is not None:
                out.setdefault("dp_size", run["server"]["dp_size"])
                break
    return out


def prompt_words(bench):
    """Which prompts the benchmark sent, in words."""
    client = (bench or {}).get("client") if isinstance((bench or {}).get("client"), dict) else {}
    dataset = client.get("dataset")
    if dataset == "chat":
        return ("chat-shaped prompts (%s: multi-turn, varied lengths, generated text), %s output tokens each"
                % (client.get("dataset_path") or "the role's chat set", client.get("output_len")))
    if dataset == "random-ids":
        return ("random token ids (random-ids: %s input and %s output tokens; random prompts mislead the accept "
                "length)" % (client.get("input_len"), client.get("output_len")))
    return "prompts: %s" % (dataset or "not recorded")


def _trio(s, digits=1):
    return "-" if s is None else "%s/%s/%s" % (fmt(s["min"], digits), fmt(s["median"], digits), fmt(s["max"], digits))


def text_table(bench, rows, cross, interval=None, advice=None):
    """The sweep as text lines (the play prints them): the prompts and runs first; per concurrency both sides' output
    tokens/s (min/median/max over the runs), the speed-up of the medians and its range, the accept length (median)
    and the verdict; then the crossover's interval and the recommendation."""
    label = (bench or {}).get("label")
    interval = interval or crossover_interval(rows)
    repeats = sorted({s["n"] for r in rows for s in (r["speculative"], r["baseline"]) if s})
    lines = ["prompts: %s; runs per point and side: %s" % (prompt_words(bench), "/".join(str(n) for n in repeats) or "-"),
             "concurrency  speculative tok/s min/med/max  off tok/s min/med/max  speed-up (range)     accept length"
             "  verdict%s" % ("  (%s)" % label if label else "")]
    for r in rows:
        ratio = "-" if r["speedup"] is None else "%.2fx (%.2f-%.2f)" % (r["speedup"], r["speedup_low"], r["speedup_high"])
        lines.append("%11d  %29s  %21s  %-19s  %13s  %s" % (
            r["concurrency"], _trio(r["speculative"]), _trio(r["baseline"]), ratio, fmt(r["accept_length"], 2),
            r["verdict"] or "-"))
    lines.append("crossover: %s" % interval["words"])
    advice_words = recommendation(rows, interval, advice)
    lines.append("recommendation: %s" % (advice_words or "none (no figures)"))
    return lines


def verdict_words(rows, cross):
    """The benchmark's verdict in one sentence (the medians; the per-point verdicts say what the spread allows)."""
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


# -- the charts' geometry (report_charts.html.j2 draws them) -------------------------------------------------------
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


class Plot:
    """A chart frame: categorical x (the concurrencies), linear y from 0."""

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

    def frame(self, cls, title, x_title, y_title):
        """What the template's ``chart`` macro draws around a chart: the SVG, the grid with its ticks, the base line,
        the categories and both axis titles."""
        return {"cls": cls, "title": title, "width": self.width, "height": self.height,
                "left": self.left, "right": self.left + self.plot_w, "top": self.top, "base": self.top + self.plot_h,
                "ticks": [{"y": self.y(t), "value": t} for t in self.ticks],
                "categories": [{"x": self.x(i), "text": c} for i, c in enumerate(self.categories)],
                "x_title": {"x": self.left + self.plot_w / 2, "y": self.height - 8, "text": x_title},
                "y_title": {"y": self.top + self.plot_h / 2, "text": y_title}}


def speedup_chart(rows, cross, label, interval=None):
    """Speed-up per concurrency: points (the medians) joined by a line, each with its range (whiskers from the
    slowest to the fastest pairing of the runs), the parity line at 1.0, the crossover and its interval marked."""
    tag = label_tag(label)
    values = [v for r in rows for v in (r["speedup"], r.get("speedup_high")) if v is not None]
    concurrencies = [r["concurrency"] for r in rows]
    plot = Plot(concurrencies, max(values + [1.2]) * 1.15)
    points = [{"x": plot.x(i), "y": plot.y(r["speedup"]), "concurrency": r["concurrency"], "speedup": r["speedup"],
               "low": r.get("speedup_low"), "high": r.get("speedup_high"),
               "y_low": plot.y(r.get("speedup_low") if r.get("speedup_low") is not None else r["speedup"]),
               "y_high": plot.y(r.get("speedup_high") if r.get("speedup_high") is not None else r["speedup"]),
               "verdict": r.get("verdict") or "", "verdict_cls": VERDICT_CLASSES.get(r.get("verdict"), ""),
               "cls": "speedup-point loss" if r["speedup"] < 1.0 else "speedup-point gain"}
              for i, r in enumerate(rows) if r["speedup"] is not None]
    band = None
    if interval and (interval.get("above") is not None or interval.get("at_most") is not None) and concurrencies:
        lo = concurrencies.index(interval["above"]) if interval.get("above") in concurrencies else -0.5
        hi = concurrencies.index(interval["at_most"]) if interval.get("at_most") in concurrencies else len(concurrencies) - 0.5
        x1, x2 = plot.x(lo), plot.x(hi)
        band = {"x": min(x1, x2), "width": abs(x2 - x1), "above": interval.get("above"),
                "at_most": interval.get("at_most"), "words": interval.get("words")}
    return {"frame": plot.frame("speedup-chart", "Speed-up of speculative decoding per concurrency" + tag,
                                "concurrency (requests in flight)", "speed-up" + tag),
            "tag": tag, "parity_y": plot.y(1.0), "points": points, "band": band,
            "line": " ".join("%.1f,%.1f" % (p["x"], p["y"]) for p in points) if len(points) > 1 else None,
            "crossover": None if cross is None else {"concurrency": cross, "x": plot.x(concurrencies.index(cross))}}


def throughput_chart(rows, label):
    """Output tokens/s of both sides per concurrency: grouped bars."""
    tag = label_tag(label)
    values = [v for r in rows for v in (r["speculative_tok_s"], r["baseline_tok_s"],
                                        (r.get("speculative") or {}).get("max"), (r.get("baseline") or {}).get("max"))
              if v is not None]
    plot = Plot([r["concurrency"] for r in rows], max(values + [1.0]) * 1.1)
    width = min(36.0, plot.band() * 0.35)
    bars = []
    for i, r in enumerate(rows):
        for offset, key, cls, side in ((-width, "speculative_tok_s", "tps-spec", "speculative"),
                                       (0.0, "baseline_tok_s", "tps-baseline", "speculation off")):
            if r[key] is not None:
                y = plot.y(r[key])
                s = r.get("speculative" if key == "speculative_tok_s" else "baseline") or {}
                bars.append({"cls": cls, "side": side, "concurrency": r["concurrency"], "value": r[key],
                             "x": plot.x(i) + offset, "y": y, "width": width, "height": plot.top + plot.plot_h - y,
                             "min": s.get("min"), "max": s.get("max"), "n": s.get("n"),
                             "y_min": plot.y(s.get("min", r[key])), "y_max": plot.y(s.get("max", r[key]))})
    return {"frame": plot.frame("throughput-chart", "Output tokens per second, both sides" + tag,
                                "concurrency (requests in flight)", "output tokens/s" + tag),
            "tag": tag, "bars": bars, "legend_y": plot.top - 14}


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
    """The history's loads but the current one: {attempt, verdict, total, spans, failed, current, finished_at}."""
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


def load_name(load):
    """A load as the timeline names it: its attempt, whether it is this load, what it was for."""
    name = "attempt %s" % (load["attempt"],) if load["attempt"] is not None else "a load"
    name += " (this load)" if load["current"] else ""
    return name + ((" (%s)" % load["note"]) if load.get("note") else "")


def timeline_chart(loads):
    """One horizontal bar per load (this one first, then the earlier ones, newest first), split by phase."""
    ticks = nice_ticks(max([l["total"] for l in loads] + [1.0]))
    left, right, row_h, pad, width = 170, 120, 26, 36, 760
    plot_w = width - left - right
    bottom = pad + row_h * len(loads)

    def xs(seconds):
        return left + plot_w * min(seconds, ticks[-1]) / ticks[-1]

    bars = []
    for row, load in enumerate(loads):
        y = pad + row * row_h
        bars.append({"cls": "load-bar" + (" current" if load["current"] else "") + (" failed" if load["failed"] else ""),
                     "attempt": load["attempt"], "total": load["total"], "name": load_name(load), "y": y,
                     "label_x": left - 8, "end_x": xs(load["total"]) + 4, "failed": load["failed"],
                     "verdict": load["verdict"], "seg_h": row_h - 8,
                     "segments": [{"cls": css_class(phase), "words": PHASE_WORDS.get(phase, phase), "start": start,
                                   "stop": stop, "x": xs(start), "width": max(xs(stop) - xs(start), 1.0)}
                                  for phase, start, stop in load["spans"]]})
    legend, legend_x = [], 10
    for phase in PHASES:
        legend.append({"phase": phase, "x": legend_x, "words": PHASE_WORDS[phase]})
        legend_x += 16 + 7 * len(PHASE_WORDS[phase]) + 18
    return {"width": width, "height": bottom + 56, "top": pad - 6, "bottom": bottom, "title_x": left + plot_w / 2,
            "ticks": [{"x": xs(t), "value": t} for t in ticks], "bars": bars, "legend": legend}


# -- what each section shows (report.html.j2 lays it out) ---------------------------------------------------------
def figure_runs(bench):
    """The table of every run: side, concurrency, figures, completed, and how the run went."""
    out = []
    for run in sorted((bench or {}).get("runs") or [], key=lambda r: (num(r.get("concurrency")) or 0, r.get("side") != "speculative")):
        if not isinstance(run, dict):
            continue
        figures = run.get("figures") if isinstance(run.get("figures"), dict) else {}
        state = "ok" if run.get("ok") else "failed: " + (run.get("error") or "no figures")
        out.append({"side": run.get("side"), "concurrency": run.get("concurrency"), "repeat": run.get("repeat"),
                    "num_prompts": run.get("num_prompts"), "calibration": bool(run.get("calibration")),
                    "figures": {key: figures.get(key) for key in TABLE_FIGURES},
                    "state": ("calibration (too short to count): " + state) if run.get("calibration") else state})
    return out


def speedup_rows(rows):
    """The speed-up table's rows: each with its class (``gain``, ``loss``, or none without a speed-up)."""
    empty = {"min": None, "median": None, "max": None, "n": 0}
    return [dict(r, cls="" if r["speedup"] is None else ("loss" if r["speedup"] < 1.0 else "gain"),
                 verdict_cls=VERDICT_CLASSES.get(r["verdict"], ""), spec=r["speculative"] or empty,
                 base=r["baseline"] or empty) for r in rows]


def bench_section(bench, rows, cross):
    """The benchmark: the verdict, the crossover's interval, the recommendation, the prompts, both charts, both
    tables, and what the client ran."""
    label = bench.get("label") or ""
    dep = bench.get("deployment") if isinstance(bench.get("deployment"), dict) else {}
    client = bench.get("client") if isinstance(bench.get("client"), dict) else {}
    interval = crossover_interval(rows)
    return {"verdict": verdict_words(rows, cross), "tag": label_tag(label), "interval": interval,
            "recommendation": recommendation(rows, interval, bench_advice(bench)), "prompts": prompt_words(bench),
            "dataset": client.get("dataset"),
            "runs_per_point": {key: client.get(key) for key in ("repeats", "min_seconds", "min_requests")},
            "speedup_chart": speedup_chart(rows, cross, label, interval),
            "throughput_chart": throughput_chart(rows, label),
            "speedups": speedup_rows(rows), "runs": figure_runs(bench),
            "client": {key: client.get(key) for key in ("module", "dataset", "input_len", "output_len", "seed")},
            "accept_from": next((((r.get("server") or {}).get("accept_length_from")) for r in bench.get("runs") or []
                                 if isinstance(r, dict) and (r.get("server") or {}).get("accept_length_from")), None),
            "speculative": json.dumps(dep.get("speculative")),
            "fingerprint_before": (dep.get("fingerprint_before") or "-")[:16],
            "fingerprint_after": (dep.get("fingerprint_after") or "-")[:16]}


def _lines(value):
    """A report's list of lines (or one text of lines), the strings only."""
    if isinstance(value, str):
        value = value.splitlines()
    return [line for line in value or [] if isinstance(line, str)]


def failure_section(status):
    """A failed load: its crash class, hint, evidence, deciding line, traceback and log excerpt."""
    report = status.get("report") if isinstance(status.get("report"), dict) else {}
    return {"verdict": status.get("verdict"), "class_uncertain": bool(report.get("class_uncertain")),
            "hint": report.get("hint"), "evidence": report.get("evidence"),
            "deciding_lineno": report.get("deciding_lineno"), "deciding_line": report.get("deciding_line"),
            "traceback": _lines(report.get("traceback")), "log_tail": _lines(report.get("log_tail")),
            "log_path": report.get("log_path") or status.get("log_path")}


def timeline_section(timeline, notes=None):
    """The load timeline: this load (the status file) and the earlier ones (the history); ``notes`` {attempt: words}
    name what a load was for (the benchmark's baseline)."""
    notes = notes or {}
    status = (timeline or {}).get("status")
    current = this_load(status)
    earlier = earlier_loads((timeline or {}).get("loads"), current["attempt"] if current else None)
    loads = ([current] if current else []) + list(reversed(earlier))
    if not loads:
        return {"loads": [], "why_none": (timeline or {}).get("status_error") or "no status file"}
    for load in loads:
        load["note"] = notes.get(load["attempt"])
        starts = {phase: start for phase, start, stop in load["spans"]}
        load["starts"] = [starts.get(phase) for phase in PHASES]
    return {"loads": loads, "chart": timeline_chart(loads),
            "current": current and {"attempt": current["attempt"], "total": current["total"],
                                    "verdict": status.get("verdict") or "still loading", "phase": status.get("phase")},
            "failure": failure_section(status) if current and current["failed"] else None}


def fitness_section(timeline):
    """The host's fitness (gpu_fitness's findings, fatal ones first), or None when the report did not check it."""
    fitness = (timeline or {}).get("fitness")
    if not isinstance(fitness, dict):
        return None
    findings = [f for f in fitness.get("findings") or [] if isinstance(f, dict)]
    return {"checked": bool(fitness.get("checked")), "fit": bool(fitness.get("fit")), "findings": findings,
            "driver": fitness.get("driver_version"), "cuda": fitness.get("cuda_version"),
            "torch_cuda": fitness.get("torch_cuda"), "gpus": len(fitness.get("gpus") or [])}


def page_context(bench, timeline, rows, cross):
    """Everything report.html.j2 shows."""
    dep = (bench or {}).get("deployment") if isinstance((bench or {}).get("deployment"), dict) else {}
    notes = {dep.get("baseline_attempt"): "baseline"} if dep.get("baseline_attempt") is not None else {}
    return {"host": (bench or timeline or {}).get("host"), "when": (bench or timeline or {}).get("time"),
            "name": (timeline or {}).get("name"), "label": (bench or {}).get("label") or "",
            "note": (bench or {}).get("note") or "",
            "bench": bench_section(bench, rows, cross) if bench else None,
            "timeline": timeline_section(timeline, notes),
            "fitness": fitness_section(timeline),
            "phases": [{"phase": p, "words": PHASE_WORDS[p]} for p in PHASES], "phase_colors": PHASE_COLORS,
            "spec_color": SPEC_COLOR, "base_color": BASE_COLOR}


# -- the page -----------------------------------------------------------------------------------------------------
def render(bench, timeline):
    """(report.html text, summary dict)."""
    bench = bench if isinstance(bench, dict) else None
    rows = speedups(bench) if bench else []
    cross = crossover(rows)
    context = page_context(bench, timeline, rows, cross)
    page = environment().get_template(PAGE_TEMPLATE).render(context)
    status = (timeline or {}).get("status") if isinstance((timeline or {}).get("status"), dict) else {}
    interval = crossover_interval(rows) if bench else None
    summary = {"host": context["host"], "time": context["when"], "label": context["label"] or None, "rows": rows,
               "crossover": cross, "verdict": verdict_words(rows, cross) if bench else None,
               "crossover_interval": interval, "prompts": prompt_words(bench) if bench else None,
               "recommendation": recommendation(rows, interval, bench_advice(bench)) if bench else None,
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
                      "crossover_interval": summary["crossover_interval"], "recommendation": summary["recommendation"],
                      "table": text_table(bench, summary["rows"], summary["crossover"], summary["crossover_interval"],
                                          bench_advice(bench)) if bench else []}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
