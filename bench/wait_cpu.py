#!/usr/bin/env python3
"""CPU cost of waiting: wait_for_model on a server that loads for a long time, the module and its supervisor.

The emulator is started in its `hang` scenario (it prints its first lines and then nothing, no HTTP) by the
module's own code (ModelWaiter, launcher detached): the module starts the supervisor program
(module_utils/sglang_supervisor.py) in a session of its own; the supervisor starts the server, follows its log, its
processes (/proc) and asks health (every 0.25 s, its default), and ends the start at its `timeout` (default 60 s)
with the verdict `timeout` in its status file; the module meanwhile waits on that status file. Both wait with
their default intervals. We measure, from just before the module's run() to its return:

- the module's CPU: this process's own user + sys (time.process_time()), less the sampler thread's own (below);
- the supervisor's CPU: utime + stime of its /proc/<pid>/stat (fields 14 and 15, in clock ticks), all of it
  since it started (its start-up included). It is not a child this bench waits for, so a sampler thread reads it
  every 0.5 s (the PID from the run state's `watcher`, checked against its start time) and keeps the last value;
  the bench reads it once more right when run() returns. The supervisor writes its verdict first and ends the
  server's tree after it, so it normally still runs then; where it had already exited, up to 0.5 s of its CPU
  (the time since the sampler's last read) is missed, and the run says so.

Each is printed per minute of the wait's wall time (module launch included), and their total as a percent of one
core. The same is printed for the part of the wait after its first 5 s (the launch and the supervisor's start-up
left out): what a long load costs per minute. In the same run (the machine is noisy), the same wait with the
events off (--no-events in the other benches: the module's and the supervisor's timed 0.1 s poll, as they waited
before the Waker; --no-baseline skips it).

Prints figures; asserts nothing about them (a run whose verdict is not the supervisor's `timeout`, or that comes
before `--seconds`, exits with an error). Last lines:
wait_cpu_s_per_min=<f> cpu_percent=<f> module_cpu_s_per_min=<f> supervisor_cpu_s_per_min=<f> module_wakes=<reason:count,...>
after_5s: wait_cpu_s_per_min=<f> cpu_percent=<f> module_cpu_s_per_min=<f> supervisor_cpu_s_per_min=<f>
poll_baseline: wait_cpu_s_per_min=<f> cpu_percent=<f> module_cpu_s_per_min=<f> supervisor_cpu_s_per_min=<f>
poll_baseline after_5s: ...
events_vs_poll: cpu=<ratio> after_5s=<ratio>
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from detect_latency import EMULATOR, FakeModule, free_port, install_supervisor, wfm, sglang_proc  # noqa: E402 - bench/detect_latency.py, importable once sys.path has bench/
from ansible.module_utils import sglang_verdict  # noqa: E402 - on ansible.module_utils once detect_latency is imported

CLK_TCK = os.sysconf("SC_CLK_TCK")
SAMPLE_EVERY = 0.5  # s between two reads of the supervisor's /proc/<pid>/stat
SKIP = 5.0  # s at the start of the wait left out of the after_5s figures


def proc_cpu(pid, start_time=None):
    """(utime + stime in s, start time in ticks) of ``pid`` from /proc/<pid>/stat; None when it is gone or, with
    ``start_time``, another process now has that PID."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # fields 3 onwards: the command name may hold spaces and ')'
    started = int(fields[19])  # field 22
    if start_time is not None and started != start_time:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, started  # fields 14 and 15


def module_cpu():
    return time.process_time()  # user + sys of this process, all threads (os.times() counts in 10 ms ticks)


class SupervisorSampler(threading.Thread):
    """Every SAMPLE_EVERY s: the supervisor's CPU (the last value read is kept) and the module's at that moment
    (this process's, less this thread's own), with the time, for the after_5s figures."""

    def __init__(self, log_dir, name):
        super().__init__(daemon=True)
        self.log_dir, self.name = log_dir, name
        self.pid = self.start_time = None
        self.cpu = None  # the supervisor's CPU at its last read (s)
        self.read_at = None  # when that was (monotonic)
        self.samples = []  # (monotonic, module CPU, supervisor CPU)
        self.halt = threading.Event()
        self.final_own = 0.0  # this thread's CPU when it ended

    def own_cpu(self):
        """This thread's CPU so far (s), read from any thread."""
        if self.ident is None:
            return 0.0
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(self.ident))
        except OSError:  # the thread has ended: its CPU as it ended
            return self.final_own

    def read(self):
        if self.pid is None:
            try:
                state = sglang_proc.read_state(self.log_dir, self.name) or {}
            except Exception:  # noqa: BLE001 - being written
                state = {}
            watcher = state.get("watcher") or {}
            if isinstance(watcher.get("pid"), int):
                self.pid, self.start_time = watcher["pid"], watcher.get("start_time")
        if self.pid is not None:
            got = proc_cpu(self.pid, self.start_time)
            if got is not None:
                self.cpu, self.read_at = got[0], time.monotonic()
        return self.cpu

    def run(self):
        while not self.halt.wait(SAMPLE_EVERY):
            sup = self.read()
            if sup is not None:
                self.samples.append((time.monotonic(), module_cpu() - time.thread_time(), sup))
        self.final_own = time.thread_time()


def one_wait(seconds, events):
    """The figures of one wait on a silent server: a dict of wall, CPU (module, supervisor) over the whole wait and
    after its first SKIP s, the verdict, and the module's Waker wakes."""
    log_dir = tempfile.mkdtemp(prefix="wait-cpu-")
    install_supervisor(log_dir)  # <run_dir>/supervisor, wait_for_model's default program_dir (run_dir: log_dir)
    port = free_port()
    module = FakeModule(name="cpu", log_dir=log_dir, health_url="http://127.0.0.1:%d/health_generate" % port,
                        timeout=seconds, stall_timeout=0, stop_on_failure=True,
                        argv=[sys.executable, EMULATOR, "--port", str(port), "--emulator-scenario", "hang"])
    wakers = []
    real_make = sglang_verdict.Waker.make

    def make(*args, **kwargs):  # every Waker the module makes: their wake counts, read at the end
        waker = real_make(*args, **kwargs)
        if waker is not None:
            wakers.append(waker)
        return waker

    sglang_verdict.Waker.make = make
    sampler = SupervisorSampler(log_dir, "cpu")
    try:
        m0, t0 = module_cpu(), time.monotonic()
        sampler.start()
        result = wfm.ModelWaiter(module, events=events).run()
        m1, t1 = module_cpu() - sampler.own_cpu(), time.monotonic()
        sampler.halt.set()
        sampler.join()
        last_read = sampler.read_at
        s1 = sampler.read()  # right at the return: the supervisor usually still ends the tree
        fresh = sampler.read_at is not None and sampler.read_at != last_read
    finally:
        sglang_verdict.Waker.make = real_make
        state = sglang_proc.read_state(log_dir, "cpu")
        if state:
            sglang_proc.stop_tree(state, grace=5)
        shutil.rmtree(log_dir, ignore_errors=True)
    wakes = {}
    for waker in wakers:
        for reason, count in waker.wakes.items():
            wakes[reason] = wakes.get(reason, 0) + count
    if s1 is None:
        raise SystemExit("the supervisor's CPU was never read (PID %s)" % sampler.pid)
    if sampler.pid != result.get("supervisor_pid"):
        raise SystemExit("sampled PID %s, but the module started supervisor %s" % (sampler.pid,
                                                                                 result.get("supervisor_pid")))
    decided = (result.get("progress") or {}).get("verdict")
    verdict = result.get("crash_class") or "ready"
    if verdict != "timeout" or decided != "timeout" or t1 - t0 < seconds:
        raise SystemExit("run did not behave: waited %.1f s (timeout %d s), verdict %s, the supervisor's %s: %s" % (
            t1 - t0, seconds, verdict, decided, result.get("msg")))
    after = [s for s in sampler.samples if s[0] >= t0 + SKIP]
    if not after:
        raise SystemExit("no sample after the first %g s" % SKIP)
    ta, ma, sa = after[0]
    return {"wall": t1 - t0, "module": m1 - m0, "supervisor": s1, "fresh": fresh,
            "stale": 0.0 if fresh else t1 - (last_read or t0),
            "after_wall": t1 - ta, "after_module": m1 - ma, "after_supervisor": s1 - sa,
            "verdict": verdict, "wakes": wakes}


def figures(wall, module, supervisor):
    total = module + supervisor
    return "wait_cpu_s_per_min=%.3f cpu_percent=%.2f module_cpu_s_per_min=%.3f supervisor_cpu_s_per_min=%.3f" % (
        total / wall * 60, total / wall * 100, module / wall * 60, supervisor / wall * 60)


def describe(mode, r):
    print("%s: waited %.1f s (verdict: %s), module CPU %.2f s, supervisor CPU %.2f s (%s)" % (
        mode, r["wall"], r["verdict"], r["module"], r["supervisor"],
        "read at the return" if r["fresh"] else "it had exited: its last read %.2f s before the return" % r["stale"]),
        flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=60, help="the wait's timeout (the supervisor decides then)")
    ap.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip the timed-poll baseline")
    args = ap.parse_args()
    ev = one_wait(args.seconds, True)
    describe("events", ev)
    if args.baseline:
        po = one_wait(args.seconds, False)
        describe("poll", po)
    print("%s module_wakes=%s" % (figures(ev["wall"], ev["module"], ev["supervisor"]),
                                  ",".join("%s:%d" % kv for kv in sorted(ev["wakes"].items())) or "-"))
    print("after_%gs: %s" % (SKIP, figures(ev["after_wall"], ev["after_module"], ev["after_supervisor"])))
    if args.baseline:
        print("poll_baseline: %s" % figures(po["wall"], po["module"], po["supervisor"]))
        print("poll_baseline after_%gs: %s" % (SKIP, figures(po["after_wall"], po["after_module"],
                                                             po["after_supervisor"])))

        def rate(r, prefix=""):
            return (r[prefix + "module"] + r[prefix + "supervisor"]) / r[prefix + "wall"]
        print("events_vs_poll: cpu=%.2f after_%gs=%.2f" % (rate(ev) / rate(po), SKIP,
                                                            rate(ev, "after_") / rate(po, "after_")))


if __name__ == "__main__":
    main()
