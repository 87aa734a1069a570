"""The report generator (roles/sglang_report/files/sglang_report.py): speed-up and crossover, the page's marks, and
every text a client, a server or its log can influence shown as data (escaped, control characters as \\xNN)."""

from __future__ import annotations

import html.parser
import importlib.util
import json
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("sglang_report", os.path.join(REPO, "roles", "sglang_report", "files",
                                                                             "sglang_report.py"))
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>"\'&\x1b[2J\x07\x9b</pre>'


def run(side, concurrency, tok_s, ok=True, **figures):
    figs = {"output_throughput": tok_s, "request_throughput": 1.0, "median_ttft_ms": 10.0, "p99_ttft_ms": 20.0,
            "median_itl_ms": 5.0, "p99_itl_ms": 9.0, "accept_length": 2.5 if side == "speculative" else None,
            "completed": 8}
    figs.update(figures)
    return {"side": side, "concurrency": concurrency, "ok": ok, "figures": figs if tok_s is not None else None,
            "error": None if ok else "the client exited with status 1 (see its console)", "label": "emulated"}


def bench(*pairs, **over):
    runs = []
    for c, spec, base in pairs:
        runs += [run("speculative", c, spec), run("baseline", c, base)]
    data = {"host": "gpu-01", "time": "20261205T020000Z", "label": "emulated", "note": "not a real GPU",
            "sweep": [c for c, _, _ in pairs], "runs": runs,
            "client": {"module": "sglang.benchmark.serving", "dataset": "random-ids", "input_len": 64,
                       "output_len": 64, "seed": 1},
            "deployment": {"speculative": {"algorithm": "EAGLE3"}, "fingerprint_before": "a" * 64,
                           "fingerprint_after": "a" * 64, "baseline_attempt": 2}}
    data.update(over)
    return data


STATUS_READY = {"attempt": 3, "verdict": "ready", "phase": "ready", "ready_after": 120.5,
                "phases": [{"phase": "launching", "at": 0.0}, {"phase": "loading_weights", "at": 10.0},
                           {"phase": "cuda_graph", "at": 80.0}, {"phase": "warmup", "at": 118.0},
                           {"phase": "ready", "at": 120.5}]}
LOADS = [{"attempt": a, "total": t, "phases": [{"phase": "launching", "at": 0.0}, {"phase": "loading_weights", "at": 9.0},
                                               {"phase": "ready", "at": t}]} for a, t in ((1, 190.0), (2, 52.0), (3, 120.5))]


class Marks(html.parser.HTMLParser):
    """The page's elements by tag, with their attributes, and its text; the parser the browser would use."""

    def __init__(self, page):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def having(self, tag, cls):
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


# -- speed-up and crossover ---------------------------------------------------------------------------------------
def test_speedup_is_speculative_over_baseline_output_tokens_per_second():
    rows = report.speedups(bench((1, 150.0, 100.0), (8, 300.0, 400.0)))
    assert [(r["concurrency"], r["speedup"]) for r in rows] == [(1, 1.5), (8, 0.75)]


def test_crossover_is_the_first_concurrency_below_one_in_ascending_order():
    data = bench((64, 100.0, 400.0), (1, 150.0, 100.0), (16, 280.0, 300.0), (4, 220.0, 200.0))
    rows = report.speedups(data)
    assert [r["concurrency"] for r in rows] == [1, 4, 16, 64]
    assert report.crossover(rows) == 16
    assert "faster up to concurrency 4 and slower from concurrency 16 on" in report.verdict_words(rows, 16)


def test_the_text_table_is_the_sweep_the_play_prints():
    data = bench((4, 220.0, 200.0), (1, 150.0, 100.0), (16, 280.0, None))
    rows = report.speedups(data)
    assert report.text_table(data, rows, report.crossover(rows)) == [
        "prompts: random token ids (random-ids: 64 input and 64 output tokens; random prompts mislead the accept "
        "length); runs per point and side: 1",
        "concurrency  speculative tok/s min/med/max  off tok/s min/med/max  speed-up (range)     accept length"
        "  verdict  (emulated)",
        "          1              150.0/150.0/150.0      100.0/100.0/100.0  1.50x (1.50-1.50)             2.50  pays",
        "          4              220.0/220.0/220.0      200.0/200.0/200.0  1.10x (1.10-1.10)             2.50  pays",
        "         16              280.0/280.0/280.0                      -  -                             2.50  -",
        "crossover: none up to 4: speculation pays at every concurrency measured",
        "recommendation: Keep speculative decoding on: it pays at every concurrency measured, up to 4. Measure higher "
        "concurrencies if the server sees more requests in flight."]


def test_no_crossover_when_speculation_wins_everywhere_and_one_at_the_lowest_when_it_never_does():
    wins = report.speedups(bench((1, 150.0, 100.0), (8, 410.0, 400.0)))
    assert report.crossover(wins) is None
    assert "faster at every concurrency measured (up to 8): no crossover" in report.verdict_words(wins, None)
    loses = report.speedups(bench((1, 90.0, 100.0), (8, 300.0, 400.0)))
    assert report.crossover(loses) == 1 and "slower already at concurrency 1" in report.verdict_words(loses, 1)


def test_exactly_one_is_no_crossover_and_a_side_without_figures_gives_no_speedup():
    rows = report.speedups(bench((1, 100.0, 100.0)))
    assert rows[0]["speedup"] == 1.0 and report.crossover(rows) is None
    data = bench((1, 150.0, 100.0))
    data["runs"].append(run("speculative", 8, 300.0))
    data["runs"].append(run("baseline", 8, None, ok=False))
    data["sweep"] = [1, 8]
    rows = report.speedups(data)
    assert {k: rows[1][k] for k in ("concurrency", "speculative_tok_s", "baseline_tok_s", "speedup", "verdict")} == {
        "concurrency": 8, "speculative_tok_s": 300.0, "baseline_tok_s": None, "speedup": None, "verdict": None}
    assert report.crossover(rows) is None


def repeated(points, **over):
    """A benchmark with several runs a point: (concurrency, [speculative tok/s], [baseline tok/s])."""
    runs = []
    for c, specs, bases in points:
        for side, values in (("speculative", specs), ("baseline", bases)):
            runs += [dict(run(side, c, v), repeat=i) for i, v in enumerate(values)]
    data = bench(*[(c, 1.0, 1.0) for c, _, _ in points], **over)
    data["runs"] = runs
    return data


# 1: pays everywhere in its spread; 4: the medians say 1.07x but the spread crosses 1.0; 16: does not pay.
THREE = [(1, [140.0, 150.0, 145.0], [100.0, 104.0, 102.0]), (4, [200.0, 230.0, 215.0], [190.0, 210.0, 200.0]),
         (16, [100.0, 110.0, 105.0], [290.0, 300.0, 295.0])]


def test_each_point_has_min_median_max_per_side_and_a_verdict_only_where_the_spread_allows():
    rows = report.speedups(repeated(THREE))
    assert rows[0]["speculative"] == {"min": 140.0, "median": 145.0, "max": 150.0, "n": 3}
    assert rows[0]["baseline"] == {"min": 100.0, "median": 102.0, "max": 104.0, "n": 3}
    assert rows[0]["speedup"] == pytest.approx(145.0 / 102.0)
    assert rows[1]["speedup_low"] == pytest.approx(200.0 / 210.0) and rows[1]["speedup_high"] == pytest.approx(230.0 / 190.0)
    assert [r["verdict"] for r in rows] == ["pays", "too close to call", "does not pay"]
    # the median alone would call concurrency 4 a gain
    assert rows[1]["speedup"] > 1.0


def test_the_crossover_comes_with_its_interval():
    rows = report.speedups(repeated(THREE))
    assert report.crossover(rows) == 16
    assert report.crossover_interval(rows) == {
        "above": 1, "at_most": 16, "close": [4],
        "words": "between 1 and 16: speculation pays at 1, does not pay at 16 (too close to call at 4)"}
    loses = report.speedups(repeated([(1, [90.0, 92.0], [100.0, 101.0]), (4, [80.0], [100.0])]))
    assert report.crossover_interval(loses)["words"] == "at or below 1: speculation does not pay from 1 on"
    close = report.speedups(repeated([(1, [99.0, 101.0], [100.0, 100.0])]))
    assert report.crossover_interval(close)["words"].startswith("unknown: no concurrency measured where")
    open_top = report.speedups(repeated([(1, [150.0], [100.0]), (4, [99.0, 103.0], [100.0])]))
    assert report.crossover_interval(open_top)["words"] == (
        "above 1: speculation pays up to 1, and the sweep cannot tell from there on (too close to call at 4)")


def test_calibration_runs_do_not_count():
    data = repeated([(1, [150.0, 151.0], [100.0, 101.0])])
    data["runs"].append(dict(run("speculative", 1, 10.0), calibration=True, repeat=None))
    assert report.speedups(data)[0]["speculative"] == {"min": 150.0, "median": 150.5, "max": 151.0, "n": 2}


def test_the_recommendation_gives_the_threshold_where_sglang_has_one_and_the_alternatives_otherwise():
    rows = report.speedups(repeated(THREE))
    interval = report.crossover_interval(rows)
    has = report.recommendation(rows, interval, {"threshold_option": "speculative-disable-batch-threshold",
                                                 "threshold_accepted": True})
    assert has.startswith("Speculative decoding pays up to concurrency 1 and does not pay from 16 on.")
    assert "Set --speculative-disable-batch-threshold 2 (sglang_server_extra_args: " in has
    dp = report.recommendation(rows, interval, {"threshold_option": "x-threshold", "threshold_accepted": True,
                                                "dp_size": 2})
    assert "Set --x-threshold 1 " in dp and "2 data-parallel ranks" in dp
    lacks = report.recommendation(rows, interval, {"threshold_option": "speculative-disable-batch-threshold",
                                                   "threshold_accepted": False})
    assert "the installed SGLang has no batch-size threshold for speculation (it does not accept " in lacks
    assert "--max-running-requests 1 " in lacks and "non-speculative replica beside this one" in lacks
    unasked = report.recommendation(rows, interval, {})
    assert "no batch-size threshold for speculation was checked" in unasked and "--max-running-requests 1" in unasked
    assert report.recommendation([], report.crossover_interval([]), {}) is None
    never = report.speedups(repeated([(1, [90.0, 91.0], [100.0, 100.0])]))
    assert "does not pay at any concurrency measured" in report.recommendation(never, report.crossover_interval(never), {})


def test_the_page_shows_the_spread_the_verdicts_the_interval_the_recommendation_and_the_prompts():
    data = repeated(THREE, recommend={"threshold_option": "speculative-disable-batch-threshold",
                                      "threshold_accepted": False})
    data["client"].update(dataset="chat", dataset_path="roles/sglang_bench/files/chat_prompts.json", repeats=3,
                          min_seconds=60.0, min_requests=32)
    page, summary = report.render(data, {"host": "gpu-01", "name": "sglang", "status": STATUS_READY, "loads": LOADS})
    marks = Marks(page)
    assert [(r["data-concurrency"], r["data-verdict"]) for r in marks.having("tr", "speedup-row")] == [
        ("1", "pays"), ("4", "too close to call"), ("16", "does not pay")]
    assert len(marks.having("line", "speedup-range")) == 3 and len(marks.having("line", "tps-range")) == 6
    (band,) = marks.having("rect", "crossover-band")
    assert band["data-above"] == "1" and band["data-at-most"] == "16"
    text = "".join(marks.text)
    assert "Crossover: between 1 and 16" in text and "too close to call" in text
    assert "Recommendation: Speculative decoding pays up to concurrency 1" in text
    assert "Prompts: chat-shaped prompts (roles/sglang_bench/files/chat_prompts.json" in text
    assert summary["crossover_interval"]["above"] == 1 and summary["recommendation"].startswith("Speculative")
    assert summary["prompts"].startswith("chat-shaped prompts")
    assert len(marks.having("tr", "run")) == 18  # every run is kept


def test_figures_that_are_not_numbers_are_no_figures():
    data = bench((1, 150.0, 100.0))
    data["runs"][1]["figures"]["output_throughput"] = "inf"
    assert report.speedups(data)[0]["speedup"] is None
    data["runs"][1]["figures"]["output_throughput"] = True
    assert report.speedups(data)[0]["speedup"] is None
    assert report.num(float("nan")) is None and report.num(3) == 3.0


# -- escaping -----------------------------------------------------------------------------------------------------
def test_shown_makes_control_characters_visible_and_the_templates_escape_markup_and_quotes():
    assert report.shown(HOSTILE) == '<script>alert(1)</script><img src=x onerror=alert(2)>"\'&\\x1b[2J\\x07\\x9b</pre>'
    assert report.shown("a\nb\tc") == "a\\x0ab\\x09c"
    assert report.shown(None) == "" and report.shown(3) == "3"
    # the page's environment: every printed value shown, then HTML-escaped (quotes too: safe in attributes)
    escaped = ("&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&#34;&#39;&amp;\\x1b[2J\\x07"
               "\\x9b&lt;/pre&gt;")
    page = report.environment().from_string('<p title="{{ v }}">{{ v }}</p>').render(v=HOSTILE)
    assert page == '<p title="%s">%s</p>' % (escaped, escaped)
    assert report.environment().from_string("<pre>{{ v|lines }}</pre>").render(v=["<b>", "a\tb", 3]) == (
        "<pre>&lt;b&gt;\na\\x09b\n3</pre>")


def test_phase_names_become_classes_only_when_known():
    assert report.css_class("cuda_graph") == "cuda_graph"
    assert report.css_class('x" onload="alert(1)') == "other"


def test_hostile_text_everywhere_stays_data_in_the_page():
    data = bench((1, 150.0, 100.0), host=HOSTILE, label=HOSTILE, note=HOSTILE)
    data["runs"][0]["side"] = HOSTILE
    data["runs"][1]["error"] = HOSTILE
    data["client"]["module"] = HOSTILE
    status = {"attempt": HOSTILE, "verdict": HOSTILE, "phase": HOSTILE,
              "phases": [{"phase": HOSTILE, "at": 0.0}, {"phase": "loading_weights", "at": 2.0}],
              "report": {"hint": HOSTILE, "deciding_line": HOSTILE, "deciding_lineno": HOSTILE, "evidence": HOSTILE,
                         "traceback": [HOSTILE], "log_tail": [HOSTILE, "line two"], "log_path": HOSTILE,
                         "elapsed": 3.0}}
    page, _ = report.render(data, {"host": HOSTILE, "name": HOSTILE, "status": status, "loads": [
        {"attempt": HOSTILE, "total": 5.0, "phases": [{"phase": HOSTILE, "at": 0.0}]}]})
    marks = Marks(page)
    assert [t for t, _ in marks.tags if t in ("script", "img", "iframe", "object", "embed")] == []
    assert not [a for _, a in marks.tags if any(k.startswith("on") for k in a)]
    assert "\x1b" not in page and "\x07" not in page and "\x9b" not in page
    assert "<script>alert" not in page
    # shown as text, in full
    text = "".join(marks.text)
    assert '<script>alert(1)</script><img src=x onerror=alert(2)>"\'&\\x1b[2J\\x07\\x9b</pre>' in text
    # a phase name from the file never becomes a class of its own
    assert all(a["class"].split()[-1].startswith("phase-") and a["class"].split()[-1][6:] in report.PHASE_COLORS
               for a in marks.having("rect", "phase-seg"))


def test_client_text_with_script_quotes_and_template_syntax_is_escaped_and_never_evaluated():
    """Prompts' dataset, model names, the label, log text: Jinja2 syntax in them is text, not template source."""
    hostile = '<script>alert("x")</script> " {{ "evaluated" ~ "-" ~ "yes" }} {% if true %}yes{% endif %} {# c #}'
    data = bench((1, 150.0, 100.0), host=hostile, label=hostile, note=hostile)
    data["client"].update(module=hostile, dataset=hostile, input_len=hostile)
    data["deployment"]["speculative"] = {"algorithm": "EAGLE3", "draft_model_path": hostile}
    data["runs"][0]["side"] = hostile
    status = {"attempt": 7, "verdict": "cuda_oom", "phase": "loading_weights",
              "phases": [{"phase": "launching", "at": 0.0}, {"phase": "loading_weights", "at": 2.0}],
              "report": {"hint": hostile, "deciding_line": hostile, "evidence": hostile, "traceback": [hostile],
                         "log_tail": [hostile], "log_path": hostile, "elapsed": 3.0}}
    page, _ = report.render(data, {"host": hostile, "name": hostile, "status": status, "loads": []})
    marks = Marks(page)
    assert [t for t, _ in marks.tags if t == "script"] == [] and "<script>alert" not in page
    # never evaluated: neither the expression's value nor the if's lone "yes" comes of it
    assert "evaluated-yes" not in page and ">yes<" not in page
    text = "".join(marks.text)
    # shown in full, as typed, where it was put
    for shown in ("eagle-deploy report: %s" % hostile, "deployment %s" % hostile,
                  "Every figure on this page is labelled %s: %s" % (hostile, hostile),
                  "SGLang's own client (%s), dataset %s, input %s and output" % (hostile, hostile, hostile),
                  "hint: %s" % hostile, "evidence: %s" % hostile, "deciding line :%s" % hostile,
                  "traceback:%s" % hostile, "log excerpt (%s):%s" % (hostile, hostile)):
        assert shown in text
    assert json.dumps(hostile) in text  # the draft model's name, inside the speculative settings (JSON)
    # a quote never ends an attribute: the run's side is its data-side, whole; the label is in the charts' titles
    assert hostile in [r["data-side"] for r in marks.having("tr", "run")]
    assert [a["aria-label"] for t, a in marks.tags if t == "svg"][:2] == [
        "Speed-up of speculative decoding per concurrency (%s)" % hostile, "Output tokens per second, both sides (%s)" % hostile]


# -- the page -----------------------------------------------------------------------------------------------------
def test_page_has_the_speedup_points_the_crossover_and_both_sides_bars_with_the_label():
    page, summary = report.render(bench((1, 150.0, 100.0), (8, 300.0, 400.0)),
                                  {"host": "gpu-01", "name": "sglang", "status": STATUS_READY, "loads": LOADS})
    marks = Marks(page)
    points = marks.having("circle", "speedup-point")
    assert [(p["data-concurrency"], p["class"]) for p in points] == [("1", "speedup-point gain"), ("8", "speedup-point loss")]
    assert [g["data-concurrency"] for g in marks.having("g", "crossover")] == ["8"]
    assert len(marks.having("line", "parity")) == 1
    assert [r["data-concurrency"] for r in marks.having("rect", "tps-spec") if "data-concurrency" in r] == ["1", "8"]
    assert [r["data-concurrency"] for r in marks.having("rect", "tps-baseline") if "data-concurrency" in r] == ["1", "8"]
    assert summary["crossover"] == 8 and summary["label"] == "emulated"
    assert [r["speedup"] for r in summary["rows"]] == [1.5, 0.75]
    # every figure carries the label: chart axes and the tables' headers
    assert page.count("(emulated)") >= 2 + 3 + 7
    assert "Every figure on this page is labelled" in page and "not a real GPU" in page
    # self-contained: nothing to load, nothing to run
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    assert "default-src 'none'" in page


def test_page_timeline_shows_this_load_next_to_the_earlier_ones():
    page, summary = report.render(None, {"host": "gpu-01", "name": "sglang", "status": STATUS_READY, "loads": LOADS})
    marks = Marks(page)
    bars = marks.having("g", "load-bar")
    # this load (attempt 3) first and once, then the earlier loads newest first
    assert [(b["data-attempt"], "current" in b["class"]) for b in bars] == [("3", True), ("2", False), ("1", False)]
    assert float(bars[0]["data-total"]) == 120.5
    assert len(marks.having("rect", "phase-loading_weights")) == 3 + 1  # a segment per load, and the legend
    assert summary["crossover"] is None and summary["verdict"] is None and summary["load"] == {"attempt": 3, "verdict": "ready"}
    assert not marks.having("section", "failure") and "Does EAGLE-3 pay here?" not in page


def test_a_failed_load_shows_its_class_hint_and_log_excerpt():
    status = {"attempt": 4, "verdict": "cuda_oom", "phase": "loading_weights",
              "phases": [{"phase": "launching", "at": 0.0}, {"phase": "loading_weights", "at": 12.0}],
              "report": {"hint": "lower --mem-fraction-static", "deciding_line": "torch.OutOfMemoryError: CUDA out of memory",
                         "deciding_lineno": 88, "evidence": "the leader exited", "elapsed": 40.2,
                         "traceback": ["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory"],
                         "log_tail": ["[TP0] Load weight begin", "\x1b[31mred\x1b[0m <b>bold</b>"]}}
    page, summary = report.render(None, {"host": "gpu-01", "name": "sglang", "status": status, "loads": LOADS[:2]})
    marks = Marks(page)
    assert len(marks.having("section", "failure")) == 1
    assert [b["data-attempt"] for b in marks.having("g", "failed")] == ["4"]
    text = "".join(marks.text)
    assert "crash class: cuda_oom" in text and "hint: lower --mem-fraction-static" in text
    assert "\\x1b[31mred\\x1b[0m <b>bold</b>" in text and "<b>bold</b>" not in page
    assert summary["load"] == {"attempt": 4, "verdict": "cuda_oom"}


def test_the_baseline_load_is_named_in_the_timeline():
    page, _ = report.render(bench((1, 150.0, 100.0)), {"host": "h", "name": "sglang", "status": STATUS_READY,
                                                      "loads": LOADS})
    assert "attempt 2 (baseline)" in page


def test_no_status_file_says_so():
    page, summary = report.render(None, {"host": "h", "name": "sglang", "status": None, "loads": [],
                                         "status_error": "file not found"})
    assert "No load recorded in the run dir yet (file not found)" in page and summary["load"] is None


def test_main_writes_the_page_and_the_summary(tmp_path, capsys):
    (tmp_path / "bench.json").write_text(json.dumps(bench((1, 150.0, 100.0), (8, 300.0, 400.0))))
    (tmp_path / "timeline.json").write_text(json.dumps({"host": "gpu-01", "status": STATUS_READY, "loads": LOADS}))
    assert report.main([str(tmp_path)]) == 0
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert json.loads((tmp_path / "summary.json").read_text())["crossover"] == 8
    assert json.loads(capsys.readouterr().out)["crossover"] == 8
    assert report.main([]) == 2


@pytest.mark.parametrize("top,ticks", [(1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]), (437.0, [0.0, 100.0, 200.0, 300.0, 400.0, 500.0]),
                                      (0, [0.0, 1.0])])
def test_axis_ticks_are_round_and_cover_the_top(top, ticks):
    assert report.nice_ticks(top) == ticks


# -- the benchmark that ran against real SGLang 0.5.17 on a lent GPU (tests/data/h100-bench) ----------------------
GPU_RUN = os.path.join(REPO, "tests", "data", "h100-bench", "reports", "localhost", "20261205T164036.969523Z")


def _kept(name):
    with open(os.path.join(GPU_RUN, name)) as handle:
        return handle.read() if name.endswith(".html") else json.load(handle)


def test_the_gpu_runs_figures_give_its_summary_speedups_and_crossover():
    data, summary = _kept("bench.json"), _kept("summary.json")
    assert data["label"] == "random weights" and data["client"]["module"] == "sglang.benchmark.serving"
    assert {(r["side"], r["concurrency"]) for r in data["runs"] if r["ok"]} == {
        (side, c) for side in ("speculative", "baseline") for c in (1, 4, 16, 64)}
    # SGLang's own accept length, from /server_info and the stream: a random draft is never accepted.
    for r in data["runs"]:
        if r["side"] == "speculative":
            assert r["server"]["avg_spec_accept_length"] == 1.0 and r["figures"]["accept_length"] == 1.0
            assert r["server"]["speculative_algorithm"] == "EAGLE3" and r["server"]["version"] == "0.5.17"
        else:
            assert r["server"]["speculative_algorithm"] is None and r["figures"]["accept_length"] is None
    rows = report.speedups(data)
    assert [(r["concurrency"], round(r["speedup"], 4)) for r in rows] == [
        (s["concurrency"], round(s["speedup"], 4)) for s in summary["rows"]]
    assert report.crossover(rows) == summary["crossover"] == 1
    assert data["deployment"]["fingerprint_before"] == data["deployment"]["fingerprint_after"]


def test_the_gpu_runs_page_has_its_marks_and_says_what_the_figures_are():
    page = Marks(_kept("report.html"))
    assert len(page.having("circle", "speedup-point")) == 4
    assert len(page.having("line", "crossover-line")) == 1 and len(page.having("text", "crossover-label")) == 1
    text = " ".join(page.text)
    assert "random weights" in text and "accept length is about 1" in text
    assert not any(t == "script" for t, _ in page.tags)  # self-contained, nothing to run or fetch
    assert not any(a.get("src", "").startswith("http") or a.get("href", "").startswith("http") for _, a in page.tags)


# -- the same benchmark with repeats (tests/data/h100-bench-repeats): 3 counted runs a point on each side -------------
REPEATS_RUN = os.path.join(REPO, "tests", "data", "h100-bench-repeats", "reports", "localhost",
                           "20261207T084220.241645Z")


def _kept_repeats(name):
    with open(os.path.join(REPEATS_RUN, name)) as handle:
        return handle.read() if name.endswith(".html") else json.load(handle)


def test_the_gpu_repeats_give_three_runs_a_point_a_spread_and_a_verdict_from_it():
    data, summary = _kept_repeats("bench.json"), _kept_repeats("summary.json")
    assert data["client"]["module"] == "sglang.benchmark.serving" and data["sweep"] == [1, 16]
    by = report.runs_by_point(data)
    # 3 counted runs per side and point; the calibration runs (a first run shorter than sglang_bench_min_seconds)
    # do not count.
    assert {key: len(runs) for key, runs in by.items()} == {
        (side, c): 3 for side in ("speculative", "baseline") for c in (1, 16)}
    assert any(r.get("calibration") for r in data["runs"])
    for runs in by.values():
        assert all(r["seconds"] >= 10 for r in runs)
    rows = report.speedups(data)
    assert [r["concurrency"] for r in rows] == [s["concurrency"] for s in summary["rows"]] == [1, 16]
    for row, kept in zip(rows, summary["rows"]):
        for side in ("speculative", "baseline"):
            assert row[side] == pytest.approx(kept[side]) and row[side]["n"] == 3
            assert row[side]["min"] < row[side]["median"] < row[side]["max"]
        # a random draft: the whole spread is below 1.0x, so the verdict is given, and it is "does not pay"
        assert row["speedup_low"] <= row["speedup"] <= row["speedup_high"] < 1.0
        assert row["verdict"] == kept["verdict"] == report.VERDICT_LOSES
        assert row["accept_length"] == 1.0
    interval = report.crossover_interval(rows)
    assert interval == summary["crossover_interval"] and (interval["above"], interval["at_most"]) == (None, 1)
    assert report.recommendation(rows, interval, data["recommend"]) == summary["recommendation"]
    assert "does not pay at any concurrency measured" in summary["recommendation"]
    assert data["deployment"]["fingerprint_before"] == data["deployment"]["fingerprint_after"]


def test_the_gpu_repeats_page_shows_the_spread_and_the_verdicts():
    page = Marks(_kept_repeats("report.html"))
    assert len(page.having("circle", "speedup-point")) == 2
    text = " ".join(page.text)
    assert "random weights" in text and "does not pay" in text


def test_the_gpu_repeats_console_keeps_the_speculation_checks_figure_with_the_check_off():
    # The smoke test after the restore: SGLang's accept length of a random draft, shown, not checked (set to 0).
    with open(os.path.join(REPO, "tests", "data", "h100-bench-repeats", "console", "bench.console.txt")) as handle:
        console = handle.read()
    line = next(i for i, text in enumerate(console.splitlines()) if "msg: 'speculation: accept length" in text)
    shown = " ".join(text.split(None, 1)[1].strip() for text in console.splitlines()[line:line + 2])
    assert "speculation: accept length 1.02 (7 requests: 508 tokens in 499 verify steps)" in shown
    assert "(not checked: sglang_server_min_accept_length is 0)" in shown
