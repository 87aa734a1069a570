#!/usr/bin/env python3
"""What the supervisor's log copy (sglang_supervisor.LogCopy, sglang_redact.Redactor) costs between server and log file.

The real LogCopy thread in a process of its own (forked; its main thread waits on it, as the supervisor's mostly
sleeps), between a real pipe and a real file, with three secrets (an API key, a token, a string with quotes and
non-ASCII: 34 encoded forms), no journal echo (``launcher: detached``). This process plays the server: it writes the
pipe and polls the file's size in a tight loop. Hop: a line written into the pipe until it is in the file, for short
log lines (one every 20 ms), each holding a secret half of the time. Throughput: 64 MiB of SGLang-like log lines (a
secret every 50 lines) through the pipe, until all of it is in the file; the copying process's own CPU time. Prints
figures; asserts nothing. Last line:
hop_p50_ms=<f> hop_p99_ms=<f> throughput_mib_s=<f> copy_cpu_s_per_mib=<f>
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import ansible.module_utils  # noqa: E402

ansible.module_utils.__path__.append(os.path.join(REPO, "module_utils"))
from ansible.module_utils import sglang_supervisor  # noqa: E402

SECRETS = ["bench-api-key-4b1e0d9f2c", "hf_benchtokenABCDEFGHIJKLMNOP", "k3y'with\"quotes/é"]


def pct(values, q):
    v = sorted(values)
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_size(fd, size, timeout=30.0):
    end = time.monotonic() + timeout
    while os.fstat(fd).st_size < size:
        if time.monotonic() > end:
            raise SystemExit("the log copy did not write %d bytes in %s s" % (size, timeout))
    return time.monotonic()


def start_copy(pipe_r, pipe_w, log_fd):
    """The LogCopy thread in a forked process of its own (PID returned); it ends at end of file."""
    pid = os.fork()
    if pid == 0:
        try:
            os.close(pipe_w)  # the server's end is ours alone: its close is the copy's end of file
            copy = sglang_supervisor.LogCopy(pipe_r, log_fd, SECRETS)
            copy.start()
            copy.join()
        finally:
            os._exit(0)
    os.close(pipe_r)
    return pid


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=200, help="lines for the hop")
    ap.add_argument("--mib", type=int, default=64, help="MiB for the throughput")
    args = ap.parse_args()
    assert sum(len(sglang_supervisor.sglang_redact.encoded_forms(s)) for s in SECRETS) == 34
    with tempfile.TemporaryDirectory(prefix="bench-log-copy-") as tmp:
        path = os.path.join(tmp, "w.log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        r, pipe = os.pipe()
        pid = start_copy(r, pipe, fd)
        os.close(fd)
        rfd = os.open(path, os.O_RDONLY)
        expected = 0
        hops = []
        for i in range(args.n):
            line = ("[2026-12-03 10:00:00 TP0] Decode batch %d, api_key=%s, #token: 74\n"
                    % (i, SECRETS[0] if i % 2 else "-")).encode()
            expected += len(line) - (len(SECRETS[0]) - 3 if i % 2 else 0)
            t0 = time.monotonic()
            os.write(pipe, line)
            hops.append(wait_size(rfd, expected) - t0)
            time.sleep(0.02)
        line = b"[2026-12-03 10:00:00 TP0] Decode batch. #running-req: 1, #token: 74, token usage: 0.00, gen throughput (token/s): 12.3\n"
        block = line * 49 + ("[2026-12-03 10:00:00] server_args={'api_key': %r}\n" % SECRETS[2]).encode()
        masked = len(block) - len(repr(SECRETS[2]).encode()) + len(b"'***'")
        count = (args.mib << 20) // len(block)
        cpu0 = cpu_seconds(pid)
        t0 = time.monotonic()
        for _ in range(count):
            os.write(pipe, block)
        t1 = wait_size(rfd, expected + count * masked, timeout=600)
        cpu = cpu_seconds(pid) - cpu0
        os.close(pipe)
        os.waitpid(pid, 0)
        os.close(rfd)
        mib = count * len(block) / float(1 << 20)
    print("hop over %d lines: p50 %.3f ms, p99 %.3f ms, max %.3f ms" % (args.n, pct(hops, 0.5) * 1e3, pct(hops, 0.99) * 1e3,
                                                                     max(hops) * 1e3))
    print("%.1f MiB through the log copy in %.2f s; its CPU %.2f s" % (mib, t1 - t0, cpu))
    print("hop_p50_ms=%.3f hop_p99_ms=%.3f throughput_mib_s=%.1f copy_cpu_s_per_mib=%.4f"
          % (pct(hops, 0.5) * 1e3, pct(hops, 0.99) * 1e3, mib / (t1 - t0), cpu / mib))


if __name__ == "__main__":
    main()
