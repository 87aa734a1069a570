#!/usr/bin/env python3
"""CPU cost of waiting: wait_for_model's loop on a server that loads for a long time.

The emulator is started in its `hang` scenario (it prints its first lines and then nothing, no HTTP),
and ModelWaiter (the module's code) waits on it until its `timeout` (default 60 s) with the default poll
(0.1 s: log, /proc) and health (0.25 s) intervals. We measure the waiting process's own CPU time
(user + sys) and print it per minute of waiting. Prints figures; asserts nothing. Last line:
wait_cpu_s_per_min=<f> cpu_percent=<f>
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=60)
    args = ap.parse_args()
    log_dir = tempfile.mkdtemp(prefix="wait-cpu-")
    port = free_port()
    module = FakeModule(name="cpu", log_dir=log_dir, health_url="http://127.0.0.1:%d/health_generate" % port,
                        timeout=args.seconds, stall_timeout=0, stop_on_failure=True,
                        argv=[sys.executable, EMULATOR, "--port", str(port), "--emulator-scenario", "hang"])
    try:
        c0, t0 = os.times(), time.monotonic()
        result = wfm.ModelWaiter(module).run()
        c1, t1 = os.times(), time.monotonic()
    finally:
        state = sglang_proc.read_state(log_dir, "cpu")
        if state:
            sglang_proc.stop_tree(state, grace=5)
        shutil.rmtree(log_dir, ignore_errors=True)
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    wall = t1 - t0
    print("waited %.1f s (verdict: %s), module CPU %.2f s" % (wall, result.get("crash_class") or "ready", cpu))
    print("wait_cpu_s_per_min=%.3f cpu_percent=%.2f" % (cpu / wall * 60, cpu / wall * 100))


if __name__ == "__main__":
    main()
