"""The report (roles/sglang_report/files/sglang_report.py, run as the role runs it) in a real headless Chromium: no
console error, the chart's marks in the DOM, and hostile text from a client, a server or its log shown as text:
no element, no script, no request comes of it (the page's Content-Security-Policy would log a violation as an error).
Fast: no server, one browser per page."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from chromium_cdp import open_page

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR = os.path.join(REPO, "roles", "sglang_report", "files", "sglang_report.py")
HOSTILE = ('</pre></svg><script>console.error("injected")</script><img src=x onerror="console.error(1)">'
           '<a href="javascript:alert(1)">x</a>{{ 7*7 }}{% if true %}yes{% endif %}\x1b]0;title\x07\x1b[2J\u202e')
DOM = """JSON.stringify({
  points: Array.from(document.querySelectorAll('circle.speedup-point')).map(e => e.dataset.concurrency),
  crossover: Array.from(document.querySelectorAll('g.crossover')).map(e => e.dataset.concurrency),
  bars: document.querySelectorAll('rect[data-concurrency]').length,
  loads: Array.from(document.querySelectorAll('g.load-bar')).map(e => e.dataset.attempt),
  failed: document.querySelectorAll('g.load-bar.failed').length,
  scripts: document.scripts.length, images: document.images.length, links: document.links.length,
  elements: Array.from(new Set(Array.from(document.querySelectorAll('*')).map(e => e.localName))).sort(),
  logTail: document.querySelector('pre.log-tail') ? document.querySelector('pre.log-tail').textContent : null,
  crashClass: document.querySelector('.crash-class') ? document.querySelector('.crash-class').textContent : null,
  banner: document.querySelector('.label-banner') ? document.querySelector('.label-banner').textContent : null,
  verdicts: Array.from(document.querySelectorAll('tr.speedup-row')).map(e => [e.dataset.concurrency, e.dataset.verdict,
    e.querySelector('td.verdict-cell').textContent, getComputedStyle(e.querySelector('td.verdict-cell')).color]),
  trios: Array.from(document.querySelectorAll('tr.speedup-row')).map(e =>
    ['spec-min', 'spec-median', 'spec-max', 'base-min', 'base-median', 'base-max'].map(c => e.querySelector('td.' + c).textContent)),
  ranges: Array.from(document.querySelectorAll('line.speedup-range')).map(e => {
    const r = e.getBoundingClientRect(); return [e.dataset.concurrency, r.height > 0]; }),
  band: Array.from(document.querySelectorAll('rect.crossover-band')).map(e => {
    const r = e.getBoundingClientRect(); return [e.dataset.above, e.dataset.atMost, r.width > 0]; }),
  interval: document.querySelector('.crossover-interval') ? document.querySelector('.crossover-interval').textContent : null,
  recommendation: document.querySelector('.recommendation') ? document.querySelector('.recommendation').innerText : null,
  prompts: document.querySelector('.prompt-set') ? document.querySelector('.prompt-set').innerText : null,
  runRows: Array.from(document.querySelectorAll('tr.run')).map(e => [e.dataset.side, e.dataset.concurrency, e.dataset.repeat,
                                                                   e.classList.contains('calibration')])})"""


def run(side, concurrency, tok_s):
    return {"side": side, "concurrency": concurrency, "ok": True, "label": "emulated",
            "figures": {"output_throughput": tok_s, "request_throughput": 2.0, "median_ttft_ms": 12.0,
                        "p99_ttft_ms": 30.0, "median_itl_ms": 6.0, "p99_itl_ms": 11.0,
                        "accept_length": 2.4 if side == "speculative" else None, "completed": 8}}


def repeated(concurrency, specs, bases):
    """The runs of one point: each side's output tokens/s, one run each."""
    out = []
    for side, values in (("speculative", specs), ("baseline", bases)):
        out += [dict(run(side, concurrency, v), repeat=i) for i, v in enumerate(values)]
    return out


def render(tmp_path, bench, timeline):
    if bench is not None:
        (tmp_path / "bench.json").write_text(json.dumps(bench))
    (tmp_path / "timeline.json").write_text(json.dumps(timeline))
    subprocess.run([sys.executable, GENERATOR, str(tmp_path)], check=True, capture_output=True, timeout=60)
    return "file://%s" % (tmp_path / "report.html")


def test_a_benchmark_report_renders_its_marks_without_errors(tmp_path):
    runs = [run(side, c, tok) for c, spec, base in ((1, 120.0, 95.0), (4, 210.0, 200.0), (16, 300.0, 380.0),
                                                   (64, 330.0, 500.0))
            for side, tok in (("speculative", spec), ("baseline", base))]
    url = render(tmp_path, {"host": "localhost", "time": "t", "label": "emulated", "note": "not SGLang",
                            "sweep": [1, 4, 16, 64], "runs": runs, "deployment": {"baseline_attempt": 2}},
                 {"host": "localhost", "name": "sglang",
                  "status": {"attempt": 3, "verdict": "ready", "phase": "ready", "ready_after": 5.4,
                             "phases": [{"phase": "launching", "at": 0}, {"phase": "loading_weights", "at": 1.0},
                                        {"phase": "ready", "at": 5.4}]},
                  "loads": [{"attempt": a, "total": 5.0, "phases": [{"phase": "launching", "at": 0}]} for a in (1, 2, 3)]})
    errors, dom = open_page(url, DOM)
    dom = json.loads(dom)
    assert errors == []
    assert dom["points"] == ["1", "4", "16", "64"] and dom["crossover"] == ["16"] and dom["bars"] == 8
    assert dom["loads"] == ["3", "2", "1"] and dom["failed"] == 0
    assert dom["scripts"] == dom["images"] == dom["links"] == 0
    assert dom["banner"].startswith("Every figure on this page is labelled emulated")


def test_a_failed_load_with_hostile_log_text_shows_it_as_text(tmp_path):
    status = {"attempt": HOSTILE, "verdict": "cuda_oom", "phase": "loading_weights",
              "phases": [{"phase": "launching", "at": 0}, {"phase": HOSTILE, "at": 1.0}],
              "report": {"hint": HOSTILE, "deciding_line": HOSTILE, "deciding_lineno": 7, "evidence": HOSTILE,
                         "traceback": ["Traceback (most recent call last):", HOSTILE],
                         "log_tail": ["[TP0] Load weight begin", HOSTILE], "log_path": HOSTILE, "elapsed": 2.0}}
    bench = {"host": HOSTILE, "label": HOSTILE, "note": HOSTILE, "sweep": [1],
             "runs": [dict(run("speculative", 1, 100.0), error=HOSTILE), run("baseline", 1, 90.0)],
             "client": {"module": HOSTILE}}
    url = render(tmp_path, bench, {"host": HOSTILE, "name": HOSTILE, "status": status, "loads": []})
    errors, dom = open_page(url, DOM)
    dom = json.loads(dom)
    assert errors == []
    assert dom["scripts"] == dom["images"] == dom["links"] == 0
    assert not {"script", "img", "a", "iframe"} & set(dom["elements"])
    assert dom["crashClass"] == "cuda_oom" and dom["failed"] == 1
    shown = HOSTILE.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
    assert dom["logTail"] == "[TP0] Load weight begin\n" + shown


def test_the_spread_the_verdicts_the_crossover_interval_the_recommendation_and_the_prompts_render(tmp_path):
    # 1 pays in its whole spread, 4 has a median above 1.0 and a spread across it, 16 does not pay
    runs = (repeated(1, [140.0, 150.0, 145.0], [100.0, 104.0, 102.0])
            + repeated(4, [200.0, 230.0, 215.0], [190.0, 210.0, 200.0])
            + repeated(16, [100.0, 110.0, 105.0], [290.0, 300.0, 295.0]))
    runs.append(dict(run("speculative", 1, 12.0), calibration=True, repeat=None))
    bench = {"host": "localhost", "time": "t", "label": "emulated", "sweep": [1, 4, 16], "runs": runs,
             "client": {"module": "sglang.benchmark.serving", "dataset": "chat",
                        "dataset_path": "roles/sglang_bench/files/chat_prompts.json", "output_len": 256,
                        "repeats": 3, "min_seconds": 60.0, "min_requests": 32},
             "recommend": {"threshold_option": "speculative-disable-batch-threshold", "threshold_accepted": True},
             "deployment": {}}
    url = render(tmp_path, bench, {"host": "localhost", "name": "sglang", "status": None, "loads": []})
    errors, dom = open_page(url, DOM)
    dom = json.loads(dom)
    assert errors == []
    assert [v[:3] for v in dom["verdicts"]] == [["1", "pays", "pays"], ["4", "too close to call", "too close to call"],
                                               ["16", "does not pay", "does not pay"]]
    assert len({v[3] for v in dom["verdicts"]}) == 3  # each verdict in its own colour
    assert dom["trios"][0] == ["140.0", "145.0", "150.0", "100.0", "102.0", "104.0"]
    assert dom["ranges"] == [["1", True], ["4", True], ["16", True]]
    assert dom["band"] == [["1", "16", True]]
    assert dom["interval"] == ("Crossover: between 1 and 16: speculation pays at 1, does not pay at 16 "
                               "(too close to call at 4)")
    assert dom["recommendation"].startswith("Recommendation: Speculative decoding pays up to concurrency 1 and does "
                                            "not pay from 16 on. Set --speculative-disable-batch-threshold 2")
    assert dom["prompts"].startswith("Prompts: chat-shaped prompts (roles/sglang_bench/files/chat_prompts.json")
    assert "Runs per point and side: 3" in dom["prompts"]
    # every run kept, the calibration run marked and not counted
    assert len(dom["runRows"]) == 19 and dom["runRows"].count(["speculative", "1", "", True]) == 1
    assert dom["scripts"] == dom["images"] == dom["links"] == 0
