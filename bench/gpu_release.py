#!/usr/bin/env python3
"""How long does GPU memory take to come back after a holder process is signalled?

    python3 bench/gpu_release.py --gib 20 --signals KILL TERM --repeat 3 --json-out release.json

For each signal and repetition: start tests/gpu/holder.py (own session), wait for its ready file and until the
GPU shows the memory, send the signal to the whole process group, then poll the GPU's used memory until it is
back under baseline + --margin-mib. Reports, per run, seconds from the signal to the holder's exit (waitpid) and
to the memory's release, and the MiB held. Polls NVML (nvidia-ml-py) when importable, else `nvidia-smi`.
Runs on the GPU machine; with a fake `nvidia-smi` on PATH and `--device none` it runs anywhere (dry run).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOLDER = os.path.join(HERE, os.pardir, "tests", "gpu", "holder.py")


class NvmlReader:
    name = "nvml"

    def __init__(self, index):
        import pynvml  # noqa: PLC0415 - optional

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def used_mib(self):
        return self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used // (1024 * 1024)


class SmiReader:
    name = "nvidia-smi"

    def __init__(self, index):
        self.index = index

    def used_mib(self):
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                              "-i", str(self.index)], capture_output=True, text=True, check=True).stdout
        return int(out.split()[0])


def make_reader(index, force_smi):
    if not force_smi:
        try:
            return NvmlReader(index)
        except Exception:  # noqa: BLE001 - fall back to nvidia-smi on any NVML trouble
            pass
    return SmiReader(index)


def poll_until(reader, predicate, timeout, interval):
    start = time.monotonic()
    while True:
        value = reader.used_mib()
        if predicate(value):
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise TimeoutError("GPU memory still %d MiB after %.1f s" % (value, timeout))
        time.sleep(interval)


def one_run(reader, args, signame, workdir):
    ready = os.path.join(workdir, "ready-%s-%d" % (signame, time.monotonic_ns()))
    baseline = reader.used_mib()
    cmd = [sys.executable, HOLDER, "--gib", str(args.gib), "--ready-file", ready, "--device", args.device]
    if args.children:
        cmd += ["--children", str(args.children), "--child-gib", str(args.child_gib)]
    proc = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + args.load_timeout
    while not os.path.exists(ready):
        if proc.poll() is not None:
            raise RuntimeError("holder exited early with rc=%s" % proc.returncode)
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise TimeoutError("holder not ready after %s s" % args.load_timeout)
        time.sleep(0.05)
    expected = args.gib * 1024 + args.children * args.child_gib * 1024
    held, _ = poll_until(reader, lambda v: v - baseline >= expected * 0.95 or args.device == "none",
                         args.load_timeout, 0.05)
    t0 = time.monotonic()
    os.killpg(proc.pid, getattr(signal, "SIG" + signame))
    proc.wait()
    exited = time.monotonic() - t0
    released, _ = poll_until(reader, lambda v: v <= baseline + args.margin_mib, args.release_timeout,
                             args.interval)
    release = time.monotonic() - t0
    return {"signal": signame, "baseline_mib": baseline, "held_mib": held, "held_delta_mib": held - baseline,
            "after_mib": released, "exit_seconds": round(exited, 4), "release_seconds": round(release, 4),
            "holder_rc": proc.returncode}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=20)
    parser.add_argument("--children", type=int, default=0)
    parser.add_argument("--child-gib", type=float, default=1)
    parser.add_argument("--signals", nargs="+", default=["KILL", "TERM"], choices=["KILL", "TERM", "INT"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--device", default="cuda", help="'none' for a dry run without a GPU")
    parser.add_argument("--margin-mib", type=int, default=256)
    parser.add_argument("--interval", type=float, default=0.005)
    parser.add_argument("--load-timeout", type=float, default=120)
    parser.add_argument("--release-timeout", type=float, default=60)
    parser.add_argument("--smi", action="store_true", help="poll nvidia-smi even when NVML is there")
    parser.add_argument("--json-out")
    args = parser.parse_args()

    reader = make_reader(args.gpu, args.smi)
    runs = []
    with tempfile.TemporaryDirectory() as workdir:
        for signame in args.signals:
            for _ in range(args.repeat):
                run = one_run(reader, args, signame, workdir)
                runs.append(run)
                print(json.dumps(run), flush=True)
    summary = {}
    for signame in args.signals:
        times = [r["release_seconds"] for r in runs if r["signal"] == signame]
        summary[signame] = {"release_seconds_median": round(statistics.median(times), 4),
                            "release_seconds_max": round(max(times), 4), "runs": len(times)}
    report = {"reader": reader.name, "gib": args.gib, "children": args.children, "runs": runs, "summary": summary}
    print(json.dumps({"summary": summary, "reader": reader.name}), flush=True)
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
