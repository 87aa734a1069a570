#!/usr/bin/env python3
"""CPU cost of waiting: wait_for_model's loop on a server that loads for a long time.

The emulator is started in its `hang` scenario (it prints its first lines and then nothing, no HTTP),
and ModelWaiter (the module's code) waits on it until its `timeout` (default 60 s) with the default poll
(0.1 s: log, /proc) and health (0.25 s) intervals. We measure the waiting process's own CPU time
(user + sys) and print it per minute of waiting, for the wait on events (sglang_watch.Waker) and, in the same run
(the machine is noisy), for the timed 0.1 s poll as the module waited before (--no-baseline skips it).
Prints figures; asserts nothing. Last lines:
wait_cpu_s_per_min=<f> cpu_percent=<f> wakes=<reason:count,...>
poll_baseline: wait_cpu_s_per_min=<f> cpu_percent=<f>
events_vs_poll: cpu=<ratio>
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from detect_latency import EMULATOR, FakeModule, free_port, wfm, sglang_proc  # noqa: E402 - bench/detect_latency.py, importable once sys.path has bench/
from ansible.module_utils import sglang_watch  # noqa: E402 - on ansible.module_utils once detect_latency is imported


def one_wait(seconds, events):
    """(CPU seconds, wall seconds, verdict, the Waker's wakes) of one wait on a silent server."""
    log_dir = tempfile.mkdtemp(prefix="wait-cpu-")
    port = free_port()
    module = FakeModule(name="cpu", log_dir=log_dir, health_url="http://127.0.0.1:%d/health_generate" % port,
                        timeout=seconds, stall_timeout=0, stop_on_failure=True,
                        argv=[sys.executable, EMULATOR, "--port", str(port), "--emulator-scenario", "hang"])
    wakes = {}
    real_close = sglang_watch.Waker.close

    def close(self):  # the Waker's counts, as the wait lets go of it
        wakes.update(self.wakes)
        real_close(self)

    sglang_watch.Waker.close = close
    try:
        c0, t0 = os.times(), time.monotonic()
        result = wfm.ModelWaiter(module, events=events).run()
        c1, t1 = os.times(), time.monotonic()
    finally:
        sglang_watch.Waker.close = real_close
        state = sglang_proc.read_state(log_dir, "cpu")
        if state:
            sglang_proc.stop_tree(state, grace=5)
        shutil.rmtree(log_dir, ignore_errors=True)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return cpu, t1 - t0, result.get("crash_class") or "ready", wakes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip the timed-poll baseline")
    args = ap.parse_args()
    cpu, wall, verdict, wakes = one_wait(args.seconds, True)
    print("events: waited %.1f s (verdict: %s), module CPU %.2f s" % (wall, verdict, cpu), flush=True)
    line = "wait_cpu_s_per_min=%.3f cpu_percent=%.2f wakes=%s" % (
        cpu / wall * 60, cpu / wall * 100, ",".join("%s:%d" % kv for kv in sorted(wakes.items())) or "-")
    if args.baseline:
        bcpu, bwall, bverdict, _ = one_wait(args.seconds, False)
        print("poll: waited %.1f s (verdict: %s), module CPU %.2f s" % (bwall, bverdict, bcpu))
    print(line)
    if args.baseline:
        print("poll_baseline: wait_cpu_s_per_min=%.3f cpu_percent=%.2f" % (bcpu / bwall * 60, bcpu / bwall * 100))
        print("events_vs_poll: cpu=%.2f" % ((cpu / wall) / (bcpu / bwall) if bcpu else float("nan")))


if __name__ == "__main__":
    main()
