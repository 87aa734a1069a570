"""playbooks/bench.yml and playbooks/report.yml on the rehearsal: `ansible-playbook playbooks/bench.yml -i
inventory/local`, real processes end to end.

The host is converged once with playbooks/serve_eagle3.yml (its own prefix and free port; the server is the SGLang
emulator with its decode model, inventory/local). Then SGLang 0.5.23's own benchmark client, installed into the
rehearsal's SGLang venv from the CPU wheelhouse (tests/setup_bench.sh), runs a small sweep (concurrency 1, 3 and 16,
the role's chat set, 48 output tokens, two runs a point: the emulator makes them alternately 6 % slower and faster)
on both sides: speculation pays at 1, is too close to call at 3 (about 1.0x) and does not pay at 16; the report is
opened in a real headless Chromium. The refusals (bad settings, a
server that is not ours, a server that is not the inventory's) and check mode must leave the server untouched.
The server is stopped at the end.
"""

from __future__ import annotations

import glob
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pytest

from ansible_run import free_port
from chromium_cdp import open_page

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
API_KEY = "local-rehearsal-key"  # inventory/local's sglang_server_api_key
SWEEP = [1, 3, 16]
REPEATS = 2  # inventory/local's sglang_bench_repeats
OUTPUT_LEN = 48  # inventory/local's sglang_bench_output_len
# Counted in the page's DOM by Chromium: the chart's marks.
MARKS = """JSON.stringify({
  points: Array.from(document.querySelectorAll('circle.speedup-point')).map(e => [e.dataset.concurrency, e.getAttribute('class')]),
  crossover: Array.from(document.querySelectorAll('g.crossover')).map(e => e.dataset.concurrency),
  spec: document.querySelectorAll('rect.tps-spec[data-concurrency]').length,
  baseline: document.querySelectorAll('rect.tps-baseline[data-concurrency]').length,
  loads: document.querySelectorAll('g.load-bar').length,
  current: document.querySelectorAll('g.load-bar.current').length,
  label: document.querySelector('.label') ? document.querySelector('.label').textContent : null,
  verdicts: Array.from(document.querySelectorAll('tr.speedup-row')).map(e => [e.dataset.concurrency, e.dataset.verdict]),
  medians: Array.from(document.querySelectorAll('tr.speedup-row td.spec-median')).map(e => e.textContent),
  ranges: document.querySelectorAll('line.speedup-range').length,
  band: Array.from(document.querySelectorAll('rect.crossover-band')).map(e => [e.dataset.above, e.dataset.atMost]),
  recommendation: document.querySelector('.recommendation') ? document.querySelector('.recommendation').textContent : null,
  prompts: document.querySelector('.prompt-set') ? document.querySelector('.prompt-set').dataset.dataset : null,
  runs: document.querySelectorAll('tr.run').length,
  scripts: document.scripts.length,
  text: document.body.innerText})"""


class Run:
    """One ansible-playbook run, parsed from the json callback."""

    def __init__(self, proc, elapsed):
        self.rc = proc.returncode
        self.elapsed = elapsed
        self.raw = proc.stdout + proc.stderr
        try:
            self.out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("no JSON from ansible-playbook (rc=%s):\n%s\n%s"
                                 % (proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
        self.tasks = [(t["task"]["name"].split(" : ", 1)[-1], t["hosts"].get("localhost", {}))
                      for play in self.out["plays"] for t in play["tasks"]]

    def results(self, name):
        return [r for n, r in self.tasks if n == name or n.startswith(name)]

    def result(self, name):
        found = self.results(name)
        assert found, "task %r did not run; tasks: %s" % (name, [n for n, _ in self.tasks])
        return found[-1]

    def failure_msgs(self):
        return [r.get("msg", "") for _, r in self.tasks if r.get("failed") and not r.get("ignore_errors")]

    def __repr__(self):
        return "rc=%s failed=%s" % (self.rc, self.failure_msgs())


@pytest.fixture(scope="module")
def host():
    # Not under pytest's tmp dir: /tmp/pytest-of-root is 0700 and the service user must walk into the prefix.
    prefix = tempfile.mkdtemp(prefix="eagle-bench-test-")
    os.chmod(prefix, 0o755)
    reports = tempfile.mkdtemp(prefix="eagle-bench-reports-")
    port = free_port()
    env = dict(os.environ)
    env.update({"PATH": BIN + os.pathsep + env.get("PATH", ""), "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
                "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
                "ANSIBLE_NOCOLOR": "1"})

    def play(*extra, playbook="bench.yml", timeout=900):
        cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", playbook), "-i", "inventory/local",
               "-e", "eagle_deploy_prefix=%s" % prefix, "-e", "sglang_server_port=%d" % port,
               "-e", "sglang_report_dir=%s" % reports] + list(extra)
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        return Run(proc, time.monotonic() - start)

    state = {"prefix": prefix, "port": port, "reports": reports, "play": play,
             "run_dir": os.path.join(prefix, "var/lib/eagle-deploy/run")}
    yield state
    stopped = play(playbook="stop.yml")
    assert stopped.rc == 0, stopped
    shutil.rmtree(prefix)
    shutil.rmtree(reports)


@pytest.fixture(scope="module")
def converged(host):
    run = host["play"](playbook="serve_eagle3.yml")
    assert run.rc == 0, run
    return run


def run_state(host):
    with open(os.path.join(host["run_dir"], "sglang.json")) as f:
        return json.load(f)


def report_dirs(host):
    return sorted(glob.glob(os.path.join(host["reports"], "localhost", "*")))


def health(host):
    with urllib.request.urlopen("http://127.0.0.1:%d/health" % host["port"], timeout=10) as resp:
        return resp.status


def sweep_arg(sweep=SWEEP):
    return json.dumps({"sglang_bench_concurrency": sweep})


class CmdlineWatch(threading.Thread):
    """Every process's command line, read from /proc every 50 ms while a run goes on: any that holds ``needle``."""

    def __init__(self, needle):
        super().__init__(daemon=True)
        self.needle = needle.encode()
        self.found, self.seen = [], 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for path in glob.glob("/proc/[0-9]*/cmdline"):
                try:
                    with open(path, "rb") as handle:
                        line = handle.read()
                except OSError:
                    continue
                self.seen += 1
                if self.needle in line:
                    self.found.append(line.replace(b"\0", b" ").decode("utf-8", "replace"))
            self.stop.wait(0.05)


def test_bad_settings_are_refused_before_anything_runs(host, converged):
    before = run_state(host)
    reports_before = report_dirs(host)
    run = host["play"]("-e", sweep_arg([4, 1, 4]))
    assert run.rc != 0
    assert any("names a concurrency twice" in m for m in run.failure_msgs()), run
    run = host["play"]("-e", sweep_arg([1]), "-e", "sglang_server_model_path=%s" % host["prefix"])
    assert run.rc != 0
    assert any("holds neither tokenizer.json nor tokenizer_config.json" in m for m in run.failure_msgs()), run
    assert run_state(host)["pid"] == before["pid"] and report_dirs(host) == reports_before


def test_check_mode_runs_no_client_and_restarts_nothing(host, converged):
    before = run_state(host)
    reports_before = report_dirs(host)
    run = host["play"]("--check", "-e", sweep_arg())
    assert run.rc == 0, run
    said = run.result("Say what the benchmark would do")["msg"]
    assert "would run SGLang's benchmark client (sglang.benchmark.serving) %d times (%d runs at each concurrency" % (
        2 * len(SWEEP) * REPEATS, REPEATS) in said and "chat prompts" in said
    assert "pid %d" % before["pid"] in said and "restart it with speculative decoding off" in said
    assert "write the report under %s" % host["reports"] in said
    assert run.results("Run SGLang's benchmark client") == [] and run.results("Show where the report is") == []
    assert run_state(host)["pid"] == before["pid"] and report_dirs(host) == reports_before


def test_the_checks_run_whatever_tags_are_skipped_and_a_routed_replica_is_refused(host, converged):
    before = run_state(host)
    reports_before = report_dirs(host)
    run = host["play"]("--check", "--skip-tags", "sglang_bench_preflight", "-e", sweep_arg())
    assert run.rc == 0, run
    assert run.results("Ask the supervisor whether our server serves"), "the preflight's watch did not run"
    assert run.results("Refuse when the running server is not the inventory's"), run
    run = host["play"]("-e", sweep_arg([1]), "-e", "sglang_fleet_router_url=http://127.0.0.1:9")
    assert run.rc != 0
    assert any("is a replica behind the router http://127.0.0.1:9" in m for m in run.failure_msgs()), run
    assert run.results("Run SGLang's benchmark client") == []
    assert run_state(host)["pid"] == before["pid"] and report_dirs(host) == reports_before


def test_bench_end_to_end(host, converged):
    before = run_state(host)
    reports_before = report_dirs(host)
    logs_before = {p: os.path.getsize(p) for p in glob.glob(os.path.join(host["prefix"], "var/log/sglang/*_r*.log"))}
    watch = CmdlineWatch(API_KEY)
    watch.start()
    try:
        run = host["play"]("-e", sweep_arg())
    finally:
        watch.stop.set()
        watch.join()
    print("bench.yml: %.1f s" % run.elapsed)
    assert run.rc == 0, run
    # The API key: on no command line while it ran (ps), in no output of Ansible's.
    assert watch.seen > 100 and watch.found == []
    assert API_KEY not in run.raw

    # The deployment is as it was: the same fingerprint, serving (restarted twice: the baseline, and back).
    after = run_state(host)
    assert after["fingerprint"] == before["fingerprint"] and after["pid"] != before["pid"] and health(host) == 200
    proof = run.result("Prove that the deployment is as it was")
    assert proof["msg"].startswith("the deployment is as it was: fingerprint %s" % before["fingerprint"][:16])

    (out,) = sorted(set(report_dirs(host)) - set(reports_before))
    # The play prints the sweep as a table (docs/benchmarks.md's): the prompts, one line per concurrency with
    # min/median/max of both sides and its verdict, the crossover's interval, the recommendation.
    table = run.result("Show the sweep's figures")["msg"]
    print("\n".join([line for r in run.results("Show the runs' figures") for line in r["msg"]] + table))
    assert table[0].startswith("prompts: chat-shaped prompts (roles/sglang_bench/files/chat_prompts.json") and \
        table[0].endswith("runs per point and side: %d" % REPEATS), table
    assert table[1].startswith("concurrency  speculative tok/s min/med/max  off tok/s min/med/max  speed-up (range)")
    assert len(table) == len(SWEEP) + 4, table
    assert [line.split("  ")[-1] for line in table[2:5]] == ["pays", "too close to call", "does not pay"], table
    assert table[-2] == ("crossover: between 1 and 16: speculation pays at 1, does not pay at 16 (too close to call "
                         "at 3)"), table
    # SGLang 0.5.23 has no batch-size threshold for speculation: the recommendation's other ways
    assert table[-1].startswith("recommendation: Speculative decoding pays up to concurrency 1 and does not pay from "
                                "16 on. Since the installed SGLang has no batch-size threshold for speculation (it "
                                "does not accept --speculative-disable-batch-threshold): cap the running batch with "
                                "--max-running-requests 1"), table
    with open(os.path.join(out, "bench.json")) as f:
        bench = json.load(f)
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    for name in os.listdir(out):
        with open(os.path.join(out, name), "rb") as f:
            assert API_KEY.encode() not in f.read(), name

    dep = bench["deployment"]
    assert dep["fingerprint_before"] == dep["fingerprint_after"] == before["fingerprint"] and dep["restored"] is True
    assert dep["baseline_fingerprint"] not in (None, before["fingerprint"])
    assert bench["label"] == "emulated" and bench["sweep"] == SWEEP
    assert bench["client"]["dataset"] == "chat" and bench["client"]["repeats"] == REPEATS
    assert bench["recommend"] == {"threshold_option": "speculative-disable-batch-threshold", "threshold_accepted": False}
    runs = {}
    for r in bench["runs"]:
        runs.setdefault((r["side"], r["concurrency"]), []).append(r)
    assert sorted(runs) == sorted((side, c) for side in ("baseline", "speculative") for c in SWEEP)
    for (side, concurrency), point in runs.items():
        # every run of the point kept, none a calibration (inventory/local: sglang_bench_min_seconds 0)
        assert [(r["repeat"], r["calibration"]) for r in point] == [(i, False) for i in range(REPEATS)], point
        for r in point:
            assert r["ok"] and r["label"] == "emulated", r
            f = r["figures"]
            assert f["completed"] == r["num_prompts"] == max(2, concurrency)
            assert f["max_concurrency"] == concurrency and f["dataset_name"] == "sharegpt"
            assert f["total_output_tokens"] == OUTPUT_LEN * f["completed"]
            assert f["output_throughput"] > 0 and f["request_throughput"] > 0
            assert 0 < f["median_ttft_ms"] <= f["p99_ttft_ms"] and 0 < f["median_itl_ms"] <= f["p99_itl_ms"]
            assert r["argv"][1:3] == ["-m", "sglang.benchmark.serving"] and "--flush-cache" in r["argv"]
            assert r["argv"][r["argv"].index("--dataset-name") + 1] == "sharegpt"
            if side == "speculative":
                # SGLang's /server_info avg_spec_accept_length of every rank (one here), this run's only: the
                # model's 2.5 a step, less where a request's last step had fewer tokens left.
                assert 2.0 < f["accept_length"] <= 2.5 and r["server"]["speculative_algorithm"] == "EAGLE3"
                assert r["server"]["accept_length_from"] == "one rank" and len(r["server"]["accept_ranks"]) == 1
            else:
                assert f["accept_length"] is None and r["server"]["speculative_algorithm"] is None
    rows = {row["concurrency"]: row for row in summary["rows"]}
    print("speed-up: %s" % {c: (round(row["speedup_low"], 3), round(row["speedup"], 3), round(row["speedup_high"], 3))
                            for c, row in rows.items()})
    assert [rows[c]["verdict"] for c in SWEEP] == ["pays", "too close to call", "does not pay"]
    assert all(rows[c]["speculative"]["n"] == rows[c]["baseline"]["n"] == REPEATS for c in SWEEP)
    assert summary["crossover_interval"] == {"above": 1, "at_most": 16, "close": [3], "words": table[-2][11:]}
    assert summary["crossover"] in (3, 16)  # the medians' crossover: concurrency 3 is about 1.0x
    # Each run flushed the cache after its warm-up (the accept length counts from there): a flush per run.
    flushes, jitter = 0, 0
    for path in glob.glob(os.path.join(host["prefix"], "var/log/sglang/*_r*.log")):
        with open(path, "rb") as f:
            f.seek(logs_before.get(path, 0))
            text = f.read()
        flushes += text.count(b"Cache is flushed successfully!")
        jitter += text.count(b"runs alternately 6 % slower and faster")
    assert flushes == 2 * len(SWEEP) * REPEATS
    # the emulator that ran is this tree's (its wheel in .cache/emulator-wheels is named by its version)
    assert jitter >= 1, "the emulator ran without --emulator-run-jitter: not this tree's emulator?"

    # The timeline: this load (the restore) next to the earlier ones, the baseline's among them.
    with open(os.path.join(out, "timeline.json")) as f:
        timeline = json.load(f)
    assert timeline["status"]["verdict"] == "ready" and timeline["status"]["attempt"] == after["attempt"]
    assert dep["baseline_attempt"] in [rec["attempt"] for rec in timeline["loads"]]

    # The page in a real browser: no console error, the chart's marks in its DOM, the label on the figures.
    errors, marks = open_page("file://" + os.path.join(out, "report.html"), MARKS)
    marks = json.loads(marks)
    assert errors == []
    assert [p[0] for p in marks["points"]] == ["1", "3", "16"]
    assert marks["points"][0][1] == "speedup-point gain" and marks["points"][2][1] == "speedup-point loss"
    assert marks["crossover"] == [str(summary["crossover"])] and marks["spec"] == 3 and marks["baseline"] == 3
    assert marks["verdicts"] == [["1", "pays"], ["3", "too close to call"], ["16", "does not pay"]]
    assert marks["ranges"] == 3 and marks["band"] == [["1", "16"]] and marks["prompts"] == "chat"
    assert marks["runs"] == 2 * len(SWEEP) * REPEATS and len(marks["medians"]) == 3
    assert marks["recommendation"].startswith("Recommendation: Speculative decoding pays up to concurrency 1")
    assert "--max-running-requests 1" in marks["recommendation"]
    assert "Crossover: between 1 and 16" in marks["text"] and "Prompts: chat-shaped prompts" in marks["text"]
    assert marks["loads"] == len(timeline["loads"]) and marks["current"] == 1
    assert marks["label"] == "emulated" and marks["scripts"] == 0
    assert "(baseline)" in marks["text"]


def test_report_playbook_alone_writes_the_timeline(host, converged):
    before = report_dirs(host)
    run = host["play"](playbook="report.yml")
    assert run.rc == 0, run
    (out,) = [d for d in report_dirs(host) if d not in before]
    assert sorted(os.listdir(out)) == ["report.html", "summary.json", "timeline.json"]
    errors, marks = open_page("file://" + os.path.join(out, "report.html"), MARKS)
    marks = json.loads(marks)
    assert errors == [] and marks["loads"] >= 1 and marks["current"] == 1 and marks["points"] == []
    assert "Load timeline" in marks["text"]


class Foreign(http.server.BaseHTTPRequestHandler):
    """A server this project does not run: answers everything 200 and counts what it was asked."""
    asked = []

    def _any(self):
        Foreign.asked.append((self.command, self.path))
        body = b'{"data": [{"id": "foreign"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _any

    def log_message(self, *args):
        pass


def test_refuses_a_server_that_is_not_ours(host, converged):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Foreign)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run = host["play"]("-e", sweep_arg([1]), "-e", "sglang_server_name=foreign",
                           "-e", "sglang_server_port=%d" % server.server_address[1])
    finally:
        server.shutdown()
    assert run.rc != 0
    assert any("bench.yml measures only the server this project runs as foreign" in m for m in run.failure_msgs()), run
    assert not [a for a in Foreign.asked if a[0] == "POST" or "flush" in a[1] or "server_info" in a[1]], Foreign.asked
    assert run.results("Run SGLang's benchmark client") == []


def test_refuses_a_server_that_is_not_the_inventory_s(host, converged):
    before = run_state(host)
    run = host["play"]("-e", sweep_arg([1]), "-e", "sglang_server_context_length=4096")
    assert run.rc != 0
    assert any("the server that runs is not what the inventory describes" in m for m in run.failure_msgs()), run
    assert run.results("Run SGLang's benchmark client") == []
    assert run_state(host)["pid"] == before["pid"]


def test_a_failed_run_leaves_the_deployment_as_it_was_and_still_writes_the_report(host, converged):
    before = run_state(host)
    dirs = report_dirs(host)
    run = host["play"]("-e", sweep_arg([1]), "-e", "sglang_bench_run_timeout=1", "-e", "sglang_bench_dataset=random-ids")
    assert run.rc != 0
    assert any("speculative side, concurrency 1: the client did not finish within 1 s" in m
               for m in run.failure_msgs()), run
    assert run.results("Run SGLang's benchmark client - baseline") == []
    assert run_state(host)["fingerprint"] == before["fingerprint"] and health(host) == 200
    (out,) = [d for d in report_dirs(host) if d not in dirs]
    with open(os.path.join(out, "bench.json")) as f:
        bench = json.load(f)
    assert [(r["side"], r["ok"]) for r in bench["runs"]] == [("speculative", False)]
    assert bench["client"]["dataset"] == "random-ids"  # the option: random token ids
    assert bench["deployment"]["restored"] is True
    # the restore came up: no error of it in the report (a restore that crashed carries the server role's composed
    # message there, crash class and all: tests/unit/test_bench_restore_error.py)
    assert bench["deployment"]["restore_error"] is None, bench["deployment"]
