#!/usr/bin/env python3
"""Scan speed of the log watcher against grep -E, on the same 1 GiB log, in one run.

Builds a log of real corpus lines (the ready/loading logs: progress bars, access lines, batch
statistics) repeated to the size asked, with one real crash block near the end, then times:
  * the watcher: LogClassifier fed by LogFollower in 8 MiB reads, to the end of the file (it stops
    at nothing: the crash is only near the end);
  * grep -E with the same crash signatures, over the same file (page cache warm for both).
Prints figures; asserts nothing. Last line: ratio_vs_grep=<f> rss_mib=<f>
(ratio = watcher throughput / grep throughput; rss = the watcher process's peak RSS).
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import ansible.module_utils  # noqa: E402

ansible.module_utils.__path__.append(os.path.join(REPO, "module_utils"))  # the project's module_utils, as tests do
from ansible.module_utils.sglang_log import LogClassifier, LogFollower  # noqa: E402 - module_utils/sglang_log.py

CORPUS = os.path.join(REPO, "tests", "data", "sglang-logs")
GREP_SIGNATURES = [
    "Scheduler hit an exception", "Received sigquit from a child proces", "SIGQUIT received",
    "Initialization failed. warmup error", "scheduler died", "out of memory", "OutOfMemoryError",
    "Not enough memory", "NCCL error", "Assertion .* failed", "device-side assert", "illegal memory access",
    "CUDA error", "Error limit reached", "Compilation terminated", "ninja: build stopped",
    "address already in use", "Traceback \\(most recent call last\\)", "^Killed",
]


def build(path, size):
    body = b""
    for name in sorted(os.listdir(CORPUS)):
        if name.endswith(".log") and ("-ready-" in name or "-loading-" in name):
            with open(os.path.join(CORPUS, name), "rb") as fh:
                body += fh.read().rstrip(b"\n") + b"\n"
    with open(os.path.join(CORPUS, "026-crash-kimi-k25-tp8-cuda-graph-capture-typeerror.log"), "rb") as fh:
        crash = fh.read()
    crash = crash[crash.index(b"[2026-02-26 16:41:24 TP6] Scheduler hit"):]
    written = 0
    with open(path, "wb") as out:
        while written + len(body) + len(crash) < size:
            out.write(body)
            written += len(body)
        out.write(crash)
        written += len(crash)
    return written


def watcher_pass(path):
    clf = LogClassifier()
    fol = LogFollower(path)
    t = time.perf_counter()
    while True:
        data = fol.read()
        if not data:
            break
        clf.feed(data)
    clf.finalize()
    return time.perf_counter() - t, clf


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="log size in MiB (default 1024)")
    ap.add_argument("--keep", help="build the log here and keep it")
    args = ap.parse_args()
    path = args.keep or os.path.join(tempfile.mkdtemp(prefix="scan-"), "big.log")
    size = build(path, args.mib * 1024 * 1024)
    print("log: %s, %.1f MiB" % (path, size / 1048576.0))
    # warm the page cache for both contenders
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    cmd = ["grep", "-E", "-n", "|".join(GREP_SIGNATURES), path]
    t = time.perf_counter()
    g = subprocess.run(cmd, stdout=subprocess.PIPE, check=False)
    t_grep = time.perf_counter() - t
    grep_hits = g.stdout.count(b"\n")
    t_watch, clf = watcher_pass(path)
    s = clf.summary()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("grep -E:  %.2f s, %.0f MiB/s, %d matching lines" % (t_grep, size / 1048576.0 / t_grep, grep_hits))
    print("watcher:  %.2f s, %.0f MiB/s, verdict %s/%s at line %s" % (
        t_watch, size / 1048576.0 / t_watch, s["state"], s["crash_class"], s["lineno"]))
    if not args.keep:
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    print("ratio_vs_grep=%.3f rss_mib=%.1f" % (t_grep / t_watch, rss))


if __name__ == "__main__":
    main()
