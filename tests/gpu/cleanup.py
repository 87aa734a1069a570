#!/usr/bin/env python3
"""Run 2 on the H200: the cleanup path, through the real modules (wait_for_model, gpu_facts) via `ansible`.

    python3 tests/gpu/cleanup.py --out DIR [--ansible /tmp/site/bin/ansible] [--gib 20] [--device cuda]

1. gpu_facts preflight (fail_on_foreign) on the idle GPU.
2. wait_for_model state=started launches tests/gpu/holder.py (GIB on the GPU + one child with 2 GiB, /health on
   127.0.0.1) as "our server".
3. A foreign holder (8 GiB), started here by plain subprocess: not ours.
4. gpu_facts with run_dir: ours = leader + child, foreign = the other one; gpu_facts fail_on_foreign refuses.
5. wait_for_model state=stopped (SIGTERM to our whole tree), then gpu_facts wait_memory_below_mib.
6. The same with a holder that ignores SIGTERM and stop_timeout=2 (the SIGKILL path).
8. Our leader alone is SIGKILLed: gpu_facts marks its orphaned child ours; wait_for_model state=stopped stops it.
9. The foreign holder is still alive; gpu_facts fail_on_foreign still refuses, naming its PID.
A sampler thread reads the GPU's used memory every 10 ms (NVML, else nvidia-smi) so that the release time after
each stop is measured from outside the modules. Everything goes to DIR/cleanup.json and DIR/cleanup.log.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLDER = os.path.join(REPO, "tests", "gpu", "holder.py")
PASS_ENV = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
            "NVSHMEM_DISABLE_NVLS", "NCCL_CUMEM_ENABLE")
RESULT_RE = re.compile(r"^localhost \| (SUCCESS|CHANGED|FAILED!|UNREACHABLE!) => ", re.M)


class Sampler(threading.Thread):
    def __init__(self, interval=0.01):
        super().__init__(daemon=True)
        self.interval = interval
        self.samples = []
        self.stop = False
        try:
            import pynvml  # noqa: PLC0415 - optional

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.read = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used // (1024 * 1024)
            self.reader = "nvml"
        except Exception:  # noqa: BLE001 - no NVML: nvidia-smi
            self.read = lambda: int(subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                capture_output=True, text=True, check=True).stdout.split()[0])
            self.reader = "nvidia-smi"

    def run(self):
        while not self.stop:
            self.samples.append((time.monotonic(), self.read()))
            time.sleep(self.interval)

    def level(self):
        return self.read()

    def first_at_or_below(self, since, mib):
        for when, used in self.samples:
            if when >= since and used <= mib:
                return when
        return None


class Driver:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.run_dir = os.path.join(args.workdir, "run")
        os.makedirs(self.run_dir, exist_ok=True)
        self.steps = []
        self.log = open(os.path.join(self.out, "cleanup.log"), "a")
        self.env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                        ANSIBLE_STDOUT_CALLBACK="minimal", ANSIBLE_NOCOLOR="1")
        self.server_env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        self.server_env["PYTHONUNBUFFERED"] = "1"

    def say(self, text):
        line = "[%s] %s" % (time.strftime("%H:%M:%S"), text)
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def module(self, step, name, args, expect_ok=True):
        cmd = [self.args.ansible, "localhost", "-i", "localhost,", "-c", "local", "-M", "library",
               "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", name, "-a", json.dumps(args)]
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=self.env, capture_output=True, text=True)
        end = time.monotonic()
        self.log.write("$ %s\n%s%s\n" % (" ".join(cmd), proc.stdout, proc.stderr))
        match = RESULT_RE.search(proc.stdout)
        result = json.loads(proc.stdout[match.end():]) if match else {"unparsed": proc.stdout + proc.stderr}
        ok = bool(match) and match.group(1) in ("SUCCESS", "CHANGED")
        self.steps.append({"step": step, "module": name, "args": args, "ok": ok, "expect_ok": expect_ok,
                           "wall_seconds": round(end - start, 3), "t_start": start, "t_end": end,
                           "result": result})
        self.say("%s: %s %s in %.2f s%s" % (step, name, "ok" if ok else "FAILED", end - start,
                                            "" if ok == expect_ok else "  <-- UNEXPECTED"))
        if result.get("msg"):
            self.say("    msg: %s" % result["msg"])
        return result, start, end

    def gpu_facts(self, step, expect_ok=True, **extra):
        args = {"run_dir": self.run_dir, "name": "holder"}
        args.update(extra)
        return self.module(step, "gpu_facts", args, expect_ok)[0]

    def summarize_processes(self, result):
        for proc in result.get("processes", []):
            self.say("    PID %s %s MiB ours=%s (%s) user=%s" % (proc["pid"], proc["used_memory_mib"], proc["ours"],
                                                              proc["ours_reason"], proc["user"]))

    def start_ours(self, step, ignore_term=False, port=30123):
        argv = [sys.executable, HOLDER, "--gib", str(self.args.gib), "--children", "1", "--child-gib", "2",
                "--device", self.args.device, "--port", str(port)]
        if ignore_term:
            argv.append("--ignore-term")
        result, _start, _end = self.module(step, "wait_for_model", {
            "name": "holder", "state": "started", "argv": argv, "environment": self.server_env,
            "log_dir": self.run_dir, "health_url": "http://127.0.0.1:%d/health_generate" % port,
            "timeout": 300, "stall_timeout": 0, "stop_timeout": 2 if ignore_term else 30})
        return result

    def stop_ours(self, step, sampler, foreign_mib, ignore_term=False):
        before = sampler.level()
        result, start, end = self.module(step, "wait_for_model", {
            "name": "holder", "state": "stopped", "log_dir": self.run_dir, "stop_timeout": 2 if ignore_term else 30})
        wait = self.gpu_facts(step + ": gpu_facts wait_for_release",
                              wait_memory_below_mib=foreign_mib + self.args.margin_mib, wait_timeout=60,
                              poll_interval=0.05)
        released_at = sampler.first_at_or_below(start, self.idle_mib + foreign_mib + self.args.margin_mib)
        dropping_at = sampler.first_at_or_below(start, before - 512)
        figure = {
            "step": step, "used_before_mib": before, "used_after_mib": sampler.level(),
            "stop_task_wall_seconds": round(end - start, 3),
            "stopped": result.get("stopped"),
            "memory_back_after_stop_task_start_seconds": round(released_at - start, 3) if released_at else None,
            "memory_back_before_stop_task_returned": bool(released_at and released_at <= end),
            "release_span_seconds": round(released_at - dropping_at, 3) if released_at and dropping_at else None,
            "gpu_facts_release_seconds": wait.get("release_seconds"), "gpu_facts_polls": wait.get("polls"),
        }
        self.say("    %s" % json.dumps(figure))
        return figure

    def main(self):
        sampler = Sampler()
        sampler.start()
        figures = {"reader": sampler.reader, "gib": self.args.gib}
        foreign = None
        try:
            figures["idle_mib"] = self.idle_mib = sampler.level()
            self.gpu_facts("1 preflight on idle GPU", fail_on_foreign=True, foreign_limit_mib=1024)

            started = self.start_ours("2 wait_for_model started (SIGTERM-able holder)")
            figures["load_seconds"] = started.get("elapsed")

            ready = os.path.join(self.args.workdir, "foreign.ready")
            foreign = subprocess.Popen(
                [sys.executable, HOLDER, "--gib", str(self.args.foreign_gib), "--device", self.args.device,
                 "--ready-file", ready], start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=open(os.path.join(self.out, "foreign.log"), "w"), stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 120
            while not os.path.exists(ready) and time.monotonic() < deadline and foreign.poll() is None:
                time.sleep(0.05)
            time.sleep(1)
            self.say("3 foreign holder PID %d (plain subprocess), ready=%s" % (foreign.pid, os.path.exists(ready)))
            figures["foreign_pid"] = foreign.pid

            facts = self.gpu_facts("4 gpu_facts with ours and foreign")
            self.summarize_processes(facts)
            foreign_mib = sum(p["used_memory_mib"] or 0 for p in facts.get("foreign", []))
            figures["foreign_mib"] = foreign_mib
            figures["ours_mib"] = sum(p["used_memory_mib"] or 0 for p in facts.get("processes", []) if p["ours"])
            figures["used_with_both_mib"] = facts.get("gpus", [{}])[0].get("memory_used_mib")
            self.gpu_facts("4b fail_on_foreign refuses", expect_ok=False, fail_on_foreign=True,
                           foreign_limit_mib=1024)

            figures["stop_sigterm"] = self.stop_ours("5 wait_for_model stopped", sampler, foreign_mib)

            self.start_ours("6 wait_for_model started (holder ignoring SIGTERM)", ignore_term=True)
            figures["stop_sigkill"] = self.stop_ours("6b wait_for_model stopped, SIGKILL after 2 s", sampler,
                                                     foreign_mib, ignore_term=True)

            started = self.start_ours("8 wait_for_model started (leader to be killed alone)")
            leader = started.get("pid")
            if leader:
                os.kill(leader, signal.SIGKILL)
                self.say("8 SIGKILL to our leader PID %s only: its child keeps its GPU memory" % leader)
                time.sleep(1)
            orphan = self.gpu_facts("8b gpu_facts after the leader died")
            self.summarize_processes(orphan)
            figures["orphan_marked_ours"] = [p["pid"] for p in orphan.get("processes", [])
                                             if p["ours"] and "left over" in p["ours_reason"]]
            figures["stop_orphans"] = self.stop_ours("8c wait_for_model stopped (orphans of a dead leader)",
                                                     sampler, foreign_mib)

            figures["foreign_alive_after_stops"] = foreign.poll() is None
            self.say("9 foreign holder alive after all stops: %s" % figures["foreign_alive_after_stops"])
            final = self.gpu_facts("9b fail_on_foreign refuses, naming the foreign PID", expect_ok=False,
                                   fail_on_foreign=True, foreign_limit_mib=1024)
            figures["refusal_names_foreign_pid"] = "PID %d " % foreign.pid in final.get("msg", "")
            self.summarize_processes(final)
        finally:
            if foreign is not None and foreign.poll() is None:
                os.killpg(foreign.pid, signal.SIGKILL)
                foreign.wait()
            time.sleep(1)
            sampler.stop = True
            sampler.join()
            figures["unexpected_steps"] = [s["step"] for s in self.steps if s["ok"] != s["expect_ok"]]
            with open(os.path.join(self.out, "cleanup.json"), "w") as handle:
                json.dump({"figures": figures, "steps": self.steps}, handle, indent=1, default=str)
            with open(os.path.join(self.out, "memory_samples.json"), "w") as handle:
                json.dump(sampler.samples, handle)
            self.say("figures: %s" % json.dumps(figures))
        return 0 if not figures["unexpected_steps"] else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--workdir", default="/tmp/gpu-cleanup")
    parser.add_argument("--ansible", default="/tmp/site/bin/ansible")
    parser.add_argument("--gib", type=float, default=20)
    parser.add_argument("--foreign-gib", type=float, default=8)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--margin-mib", type=int, default=1024)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return Driver(args).main()


if __name__ == "__main__":
    sys.exit(main())
