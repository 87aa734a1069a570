#!/usr/bin/env python3
"""How fast does wait_for_model notice a crash, and readiness? And SGLang's own harness?

For each run the emulator is launched through wait_for_model's own wait loop (ModelWaiter, the code
the module runs). A watcher thread polls the log file every millisecond and stamps the moment the
event's line is written ("Scheduler hit an exception" for the crash scenario, "fired up" for the ready
scenario; the emulator answers /health_generate 200 only after that line). Latency = module return -
event. For a crash, the evidence the module acts on is a process of the server's tree gone (the scheduler
exits after its traceback; the launcher tears the rest down): the same thread also follows the tree (the leader
from the run state and its children, every millisecond) and stamps the first process that exits; latency from
evidence = module return - that moment. In the same run, a second thread applies the strategy of SGLang's test harness
(popen_launch_server: poll /health_generate every 10 s, look only at whether the parent exited) to the
same server, and we stamp when it would have noticed.

The wait looks at each event (a process exits, the log is written, a health answer comes in: sglang_verdict.Waker).
With --baseline (the default) every run is repeated, alternated, with the events off (the timed 0.1 s poll, as the
module waited before): the machine is noisy, so the two are compared within the same run.

Verdict -> task result (``--steps N``, 10 by default; 0: off): the task as a play runs it, ``ansible localhost -m
wait_for_model`` with the project's action plugin, which calls the module in steps (``step_time`` 2 s). The emulator
loads; the health URL is a socket of the bench's that takes every connection and never answers, and outlives the
server's tree, as SGLang 0.5.17's leader holds /health_generate for seconds after its scheduler died (its SIGQUIT
handler sleeps 5 s in the event loop): the start stays pending. 3-5 s in, in a later step, the event: with
``--evidence hang`` (the default) the first request to the server (the emulator's crash_hang) logs a scheduler crash
and every process stays alive, as in the H200 incident; with ``--evidence kill`` (the emulator warming up) a worker
of the server is SIGKILLed. The supervisor
writes its verdict. A thread stamps when the status file first holds a verdict (1 ms poll) and when ansible prints
the task's result line, and the event (the crash line in the server's log, or the kill): verdict -> result,
event -> verdict, event -> result. With ``--base DIR`` (a checkout of
another commit, e.g. ``git worktree add /tmp/base HEAD``) every run is repeated, alternated, with that tree's module,
module_utils and action plugin, and the ratios are printed.

Prints figures; asserts nothing. Last lines:
crash_p50_s=<f> crash_p99_s=<f> evidence_p50_s=<f> evidence_p99_s=<f> ready_p50_s=<f> ready_p99_s=<f>
harness_crash_p50_s=<f>
poll_baseline: crash_p50_s=<f> ... ready_p99_s=<f>
events_vs_poll: evidence_p99=<ratio> ready_p99=<ratio> ...
verdict_to_result_p50_s=<f> verdict_to_result_p99_s=<f> event_to_verdict_p50_s=<f> ... event_to_result_p99_s=<f>
base: verdict_to_result_p50_s=<f> ... (with --base)
now_vs_base: verdict_to_result_p50=<ratio> verdict_to_result_p99=<ratio> ... (with --base)
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "library"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import ansible.module_utils  # noqa: E402 - the sys.path set-up above comes first

ansible.module_utils.__path__.append(os.path.join(REPO, "module_utils"))
import wait_for_model as wfm  # noqa: E402 - library/wait_for_model.py, once module_utils/ is on ansible.module_utils
from ansible.module_utils import sglang_proc  # noqa: E402 - module_utils/sglang_proc.py, once on ansible.module_utils
from installed_programs import install_supervisor  # noqa: E402 - the supervisor as the role sglang_server installs it

EMULATOR = os.path.join(REPO, "tests", "emulator", "sglang-emulator")  # the emulator package, run from the tree


class FakeModule(object):
    check_mode = False

    def __init__(self, **params):
        self.params = dict((k, v.get("default")) for k, v in wfm.argument_spec().items())
        self.params.update(params)
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)

    @staticmethod
    def run_command(args, **kwargs):
        """AnsibleModule.run_command's (rc, out, err), for what the run asks the host (systemctl)."""
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stamp_line(path, needle, out, stop, log_dir=None, name="bench"):
    """Poll the log every 1 ms; record when `needle` first appears. With ``log_dir``, also follow the server's
    process tree (the leader from its run state, and the leader's children) and record when the first of
    them exits (gone, or a zombie)."""
    needle = needle.encode()
    seen = b""
    known = set()
    while not stop.is_set():
        if "event" not in out:
            try:
                with open(path, "rb") as fh:
                    fh.seek(len(seen))
                    seen += fh.read()
            except OSError:
                pass
            if needle in seen:
                out["event"] = time.monotonic()
        if log_dir is not None and "evidence" not in out:
            if not known:
                state = None
                try:
                    state = sglang_proc.read_state(log_dir, name)
                except Exception:  # noqa: BLE001 - not written yet
                    pass
                if state and state.get("pid"):
                    known.add(state["pid"])
            for pid in list(known):
                try:
                    with open("/proc/%d/task/%d/children" % (pid, pid)) as fh:
                        known.update(int(x) for x in fh.read().split())
                except OSError:
                    pass
            if any(sglang_proc.proc_state(pid) in (None, "Z", "X") for pid in known):
                out["evidence"] = time.monotonic()
        if "event" in out and (log_dir is None or "evidence" in out):
            return
        time.sleep(0.001)


def harness(url, pid_alive, out, stop, interval=10.0):
    """SGLang's popen_launch_server strategy: parent exited? else GET health; sleep 10 s."""
    while not stop.is_set():
        if not pid_alive():
            out["harness"] = time.monotonic()
            return
        try:
            if urllib.request.urlopen(url, timeout=5).status == 200:
                out["harness_ready"] = time.monotonic()
                return
        except Exception:  # pylint: disable=broad-except
            pass
        stop.wait(interval)


def one_run(scenario, tmp, run_harness, events=True):
    port = free_port()
    log_dir = tempfile.mkdtemp(dir=tmp)
    install_supervisor(log_dir)  # <run_dir>/supervisor, wait_for_model's default program_dir (run_dir: log_dir)
    load = random.uniform(0.8, 2.0)
    url = "http://127.0.0.1:%d/health_generate" % port
    module = FakeModule(name="bench", log_dir=log_dir, health_url=url, timeout=60, stall_timeout=30,
                        stop_on_failure=False,
                        argv=[sys.executable, EMULATOR, "--port", str(port), "--emulator-scenario", scenario,
                              "--emulator-load-seconds", "%.3f" % load, "--emulator-capture-seconds", "0.2"])
    marks = {}
    stop = threading.Event()
    needle = "Scheduler hit an exception" if scenario == "crash_loading" else "The server is fired up"
    watcher = threading.Thread(target=stamp_line, args=(os.path.join(log_dir, "bench_r1.log"), needle, marks, stop,
                                                        log_dir if scenario == "crash_loading" else None))
    watcher.start()
    hthread = None
    waiter = wfm.ModelWaiter(module, events=events)
    if run_harness:
        def start_harness():
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not os.path.exists(os.path.join(log_dir, "bench.json")):
                time.sleep(0.001)
            state = sglang_proc.read_state(log_dir, "bench")
            harness(url, lambda: sglang_proc.pid_alive(state["pid"]), marks, stop)
        hthread = threading.Thread(target=start_harness)
        hthread.start()
    result = waiter.run()
    marks["returned"] = time.monotonic()
    if hthread is not None:
        hthread.join(timeout=15)
    stop.set()
    watcher.join()
    state = sglang_proc.read_state(log_dir, "bench")
    if state:
        sglang_proc.stop_tree(state, grace=5)
    shutil.rmtree(log_dir, ignore_errors=True)
    ok = ("event" in marks) and (bool(result.get("failed")) == (scenario == "crash_loading"))
    if not ok:
        raise SystemExit("run did not behave: %r %r" % (marks, {k: result.get(k) for k in ("failed", "crash_class", "msg")}))
    if scenario == "crash_loading" and "evidence" not in marks:
        raise SystemExit("crash run: no process of the server was seen to exit: %r" % marks)
    return (marks["returned"] - marks["event"],
            (marks["harness"] - marks["event"]) if "harness" in marks else None,
            result.get("crash_class"),
            (marks["returned"] - marks["evidence"]) if "evidence" in marks else None)


def _wait_port(port, deadline):
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.01)
    return False


def _stamp_verdict(path, marks, stop, log_dir=None):
    """Poll the supervisor's status file every 1 ms: when it first holds a verdict. With ``log_dir``, also when the
    server's log (bench_r1.log) first shows the crash line (``event``)."""
    seen = b""
    while not stop.is_set():
        if log_dir is not None and "event" not in marks:
            try:
                with open(os.path.join(log_dir, "bench_r1.log"), "rb") as fh:
                    fh.seek(len(seen))
                    seen += fh.read()
            except OSError:
                pass
            if b"Scheduler hit an exception" in seen:
                marks["event"] = time.monotonic()
        try:
            with open(path) as fh:
                st = json.load(fh)
        except (OSError, ValueError):
            st = {}
        if st.get("verdict") is not None:
            marks["verdict"] = time.monotonic()
            return
        time.sleep(0.001)


def steps_run(tree, tmp, evidence="hang"):
    """One task through ``ansible`` (the action plugin of ``tree``, its module and module_utils) that fails on a
    verdict written in a later step (see the module docstring). ``evidence``: ``kill`` (SIGKILL of a worker) or
    ``hang`` (the emulator's crash_hang: the first request's decode logs a scheduler crash, every process stays
    alive, health is held). Returns (verdict -> result, event -> verdict, event -> result, steps)."""
    port = free_port()
    log_dir = tempfile.mkdtemp(dir=tmp)
    # The health URL: a socket that takes every connection and never answers (no accept: the kernel's backlog), and
    # is no process of the server's, so it holds on after the supervisor ends the tree, as SGLang 0.5.17's leader does
    # (its SIGQUIT handler sleeps 5 s in the event loop, SIGTERM waits behind it).
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1024)
    args = {"name": "bench", "log_dir": log_dir, "launcher": "detached", "timeout": 120, "stall_timeout": 60,
            "health_url": "http://127.0.0.1:%d/health_generate" % holder.getsockname()[1], "port": port, "step_time": 2,
            "argv": [sys.executable, EMULATOR, "--port", str(port), "--emulator-load-seconds", "0.3",
                     "--emulator-capture-seconds", "0.1"] + (
                ["--emulator-scenario", "crash_hang"] if evidence == "hang" else
                ["--emulator-scenario", "normal", "--emulator-warmup-seconds", "120"])}
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(tree, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", PYTHONUNBUFFERED="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", "wait_for_model", "-a", json.dumps(args)]
    marks, stop = {}, threading.Event()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []

    def read():
        for line in proc.stdout:
            out.append(line)
            if "result" not in marks and line.startswith(("localhost | FAILED", "localhost | CHANGED",
                                                          "localhost | SUCCESS")):
                marks["result"] = time.monotonic()
    reader = threading.Thread(target=read)
    reader.start()
    stamper = threading.Thread(target=_stamp_verdict, args=(os.path.join(log_dir, "bench.status.json"), marks, stop,
                                                            log_dir if evidence == "hang" else None))
    stamper.start()
    state = None
    try:
        if not _wait_port(port, time.monotonic() + 60):
            raise SystemExit("steps run: the emulator never listened:\n%s" % "".join(out)[-3000:])
        time.sleep(random.uniform(3.0, 5.0))
        state = sglang_proc.read_state(log_dir, "bench")
        if evidence == "kill":
            with open("/proc/%d/task/%d/children" % (state["pid"], state["pid"])) as fh:
                kids = [int(x) for x in fh.read().split()]
            marks["event"] = time.monotonic()
            os.kill(kids[0], signal.SIGKILL)
        else:
            def first_request():
                body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}).encode()
                req = urllib.request.Request("http://127.0.0.1:%d/generate" % port, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
                try:
                    urllib.request.urlopen(req, timeout=30).read()
                except Exception:  # noqa: BLE001 - its decode crashes: no answer is the point
                    pass
            threading.Thread(target=first_request, daemon=True).start()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        holder.close()
        reader.join(timeout=10)
        stop.set()
        stamper.join()
        state = state or sglang_proc.read_state(log_dir, "bench")
        if state:
            sglang_proc.stop_tree(state, grace=5)
        shutil.rmtree(log_dir, ignore_errors=True)
    text = "".join(out)
    if os.environ.get("DETECT_LATENCY_SHOW"):
        print(text)
    if proc.returncode == 0 or any(key not in marks for key in ("event", "verdict", "result")):
        raise SystemExit("steps run did not behave (rc %s, %r):\n%s" % (proc.returncode, marks, text[-3000:]))
    try:
        steps = json.loads(text[text.index("=> {") + 3:]).get("steps")
    except ValueError:
        steps = None
    return (marks["result"] - marks["verdict"], marks["verdict"] - marks["event"], marks["result"] - marks["event"],
            steps)


STEP_KEYS = ("verdict_to_result", "event_to_verdict", "event_to_result")


def steps_figures(runs):
    return " ".join("%s_%s_s=%.3f" % (key, q, pct(runs[key], v)) for key in STEP_KEYS
                    for q, v in (("p50", 0.5), ("p99", 0.99)))


def pct(values, q):
    v = sorted(values)
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def figures(crash, evidence, ready):
    return ("crash_p50_s=%.3f crash_p99_s=%.3f evidence_p50_s=%.3f evidence_p99_s=%.3f ready_p50_s=%.3f "
            "ready_p99_s=%.3f" % (pct(crash, 0.5), pct(crash, 0.99), pct(evidence, 0.5), pct(evidence, 0.99),
                                  pct(ready, 0.5), pct(ready, 0.99)))


def steps_main(args):
    trees = [("now", REPO)] + ([("base", os.path.abspath(args.base))] if args.base else [])
    runs = dict((name, dict((key, []) for key in STEP_KEYS)) for name, _ in trees)
    tmp = tempfile.mkdtemp(prefix="detect-latency-steps-")
    event = {"kill": "kill", "hang": "crash line"}[args.evidence]
    try:
        for i in range(args.steps):
            for name, tree in trees:
                figures_ = steps_run(tree, tmp, args.evidence)
                for key, value in zip(STEP_KEYS, figures_):
                    runs[name][key].append(value)
                print("steps run %2d (%s): verdict -> result %.3f s, %s -> verdict %.3f s, %s -> result %.3f s, "
                      "%s steps" % (i + 1, name, figures_[0], event, figures_[1], event, figures_[2], figures_[3]),
                      flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(steps_figures(runs["now"]))
    if args.base:
        print("base: %s" % steps_figures(runs["base"]))
        print("now_vs_base: " + " ".join(
            "%s_%s=%.2f" % (key, q, pct(runs["now"][key], v) / pct(runs["base"][key], v))
            for key in STEP_KEYS for q, v in (("p50", 0.5), ("p99", 0.99))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=20, help="runs per scenario (>= 20 for the README figures)")
    ap.add_argument("--harness-runs", type=int, default=None, help="crash runs that also time the harness (default: all)")
    ap.add_argument("--no-baseline", dest="baseline", action="store_false",
                    help="skip the runs with the events off (the timed poll)")
    ap.add_argument("--no-events", dest="events", action="store_false",
                    help="only the timed poll (the wait as it was before the Waker)")
    ap.add_argument("--steps", type=int, default=10, help="verdict -> task result runs through ansible (0: none)")
    ap.add_argument("--evidence", choices=("hang", "kill"), default="hang",
                    help="what fails the steps runs: the H200 incident's crash lines with health held (hang), or a "
                         "worker's SIGKILL (kill)")
    ap.add_argument("--base", default=None, help="a checkout of another commit: its steps runs alternate with ours")
    ap.add_argument("--only-steps", action="store_true", help="only the verdict -> task result runs")
    args = ap.parse_args()
    random.seed(1)
    if args.only_steps:
        args.n = 0
    tmp = tempfile.mkdtemp(prefix="detect-latency-")
    modes = [args.events] + ([False] if args.baseline and args.events else [])
    runs = dict((m, {"crash": [], "evidence": [], "ready": []}) for m in modes)
    harness_lat, classes = [], set()
    hruns = args.n if args.harness_runs is None else args.harness_runs
    name = {True: "events", False: "poll"}
    try:
        for i in range(args.n):
            for mode in modes:
                lat, h, cls, ev = one_run("crash_loading", tmp, run_harness=i < hruns and mode == args.events,
                                          events=mode)
                runs[mode]["crash"].append(lat)
                runs[mode]["evidence"].append(ev)
                classes.add(cls)
                if h is not None:
                    harness_lat.append(h)
                print("crash run %2d (%s): module %.3f s after the line, %.3f s after the first process exit, harness %s"
                      % (i + 1, name[mode], lat, ev, "%.3f s" % h if h is not None else "-"), flush=True)
        for i in range(args.n):
            for mode in modes:
                lat, _, _, _ = one_run("normal", tmp, run_harness=False, events=mode)
                runs[mode]["ready"].append(lat)
                print("ready run %2d (%s): module %.3f s" % (i + 1, name[mode], lat), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.steps:
        steps_main(args)
    if not args.n:
        return
    print("crash classes seen: %s" % ", ".join(sorted(c for c in classes if c)))
    main_runs = runs[args.events]
    hp50 = pct(harness_lat, 0.5) if harness_lat else float("nan")
    print("module vs harness, crash p50: %.3f s vs %.3f s (%.0fx faster)"
          % (pct(main_runs["crash"], 0.5), hp50, hp50 / pct(main_runs["crash"], 0.5)))
    print("%s harness_crash_p50_s=%.3f" % (figures(**main_runs), hp50))
    if len(modes) == 2:
        base = runs[False]
        print("poll_baseline: %s" % figures(**base))
        print("events_vs_poll: " + " ".join(
            "%s_%s=%.2f" % (key, q, pct(main_runs[key], v) / pct(base[key], v))
            for key in ("crash", "evidence", "ready") for q, v in (("p50", 0.5), ("p99", 0.99))))


if __name__ == "__main__":
    main()
