#!/usr/bin/env python3
"""What the model role costs: a fetch's throughput against a local Hub (the test double,
tests/integration/hub_double.py, in this process), and an unchanged re-run for a model of 1,000 files.

1. A model of --shards shards of --shard-mib MiB (and its small files) fetched by the role
   (tests/integration/model_role.yml: list, disk check, the fetch program with huggingface_hub 2.4.0's http_get,
   SHA-256 of every file, the manifest) into a fresh directory, --runs times. Figures: the fetch program's own time
   (from its status file: listing and start-up excluded) and the whole task's, as MB/s (10^6 bytes).
2. A model of --files files (1,000: config, shards and many small ones) fetched once, then the no-op: the look alone
   in process (``sglang_weights.look``: the manifest and an lstat per file), the module's own check-mode call through
   ansible (``ansible localhost -m sglang_model --check``), and the whole role play, each --noop-runs times (medians),
   against an empty play (ansible's start-up).

huggingface_hub comes from the tests' wheel cache (tests/integration/hf_wheels.py) into a virtualenv of the
bench's own. Prints figures; asserts nothing. Last two lines exactly:
  fetch_mb_s=<f> fetch_task_mb_s=<f> bytes=<n> files=<n>
  noop_files=<n> look_ms=<f> module_call_s=<f> role_play_s=<f> empty_play_s=<f>
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, REPO)

import ansible.module_utils  # noqa: E402 - after the path set-up

import hf_wheels  # noqa: E402
import hub_double  # noqa: E402

ansible.module_utils.__path__.append(os.path.join(REPO, "module_utils"))  # the project's module_utils, as tests do
from ansible.module_utils import sglang_weights  # noqa: E402

PLAYBOOK = os.path.join(REPO, "tests", "integration", "model_role.yml")
EMPTY = "- name: Empty play\n  hosts: all\n  gather_facts: false\n  tasks: []\n"


def env():
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                PATH=BIN + os.pathsep + os.environ.get("PATH", ""))


def play(prefix, variables, playbook=PLAYBOOK):
    path = os.path.join(prefix, "vars.json")
    with open(path, "w") as fh:
        json.dump(variables, fh)
    cmd = [os.path.join(BIN, "ansible-playbook"), playbook, "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "@" + path]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit("ansible-playbook failed (rc=%d):\n%s\n%s" % (proc.returncode, proc.stdout[-3000:],
                                                                      proc.stderr[-2000:]))
    return elapsed, json.loads(proc.stdout[proc.stdout.find("{"):])


def task_result(out, name):
    """The task's result, with ``task_s``: its duration as the json callback recorded it."""
    from datetime import datetime
    for p in out["plays"]:
        for t in p["tasks"]:
            if t["task"]["name"].endswith(name):
                d = t["task"]["duration"]
                span = datetime.fromisoformat(d["end"].rstrip("Z")) - datetime.fromisoformat(d["start"].rstrip("Z"))
                return dict(t["hosts"]["localhost"], task_s=span.total_seconds())
    raise KeyError(name)


def settings(prefix, case, endpoint, python, repo, name):
    return {
        "sglang_model_models": [{"name": name, "repo": repo, "revision": "main",
                                 "path": os.path.join(prefix, case, "models", name)}],
        "sglang_model_state_dir": os.path.join(prefix, case, "state"),
        "sglang_model_python": python, "sglang_model_hf_endpoint": endpoint,
        "sglang_model_group": "root", "sglang_model_disk_margin_mib": 1, "sglang_model_step_time": 5,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-mib", type=int, default=128)
    ap.add_argument("--runs", type=int, default=2, help="fresh fetches timed (default 2)")
    ap.add_argument("--files", type=int, default=1000, help="files of the no-op model (default 1000)")
    ap.add_argument("--noop-runs", type=int, default=5)
    args = ap.parse_args()
    wheels = hf_wheels.wheelhouse() if hf_wheels.complete() else hf_wheels.fetch()
    prefix = tempfile.mkdtemp(prefix="eagle-model-bench-")
    os.chmod(prefix, 0o755)
    servers = []
    try:
        venv = os.path.join(prefix, "venv")
        subprocess.run([shutil.which("python3", path="/usr/bin") or "python3", "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "--no-index", "--find-links", wheels,
                        hf_wheels.HF_REQUIREMENT], check=True)
        python = os.path.join(venv, "bin", "python")
        src = os.path.join(prefix, "src")
        big = hub_double.make_model(os.path.join(src, "big"), shards=args.shards, shard_size=args.shard_mib << 20,
                                    seed="bench")
        small_files = max(0, args.files - 4 - 1)
        many = hub_double.make_model(os.path.join(src, "many"), shards=1, shard_size=1 << 20, seed="many",
                                     extra_files=small_files)
        double = hub_double.Double([hub_double.Repo("bench/big", os.path.join(src, "big")),
                                    hub_double.Repo("bench/many", os.path.join(src, "many"))])
        servers.append(hub_double.serve(double))
        endpoint = "http://127.0.0.1:%d" % servers[0].server_address[1]
        total = sum(big.values())

        print("== fetch: %d files, %d bytes, against the local Hub double" % (len(big), total))
        program_s, task_s = [], []
        for i in range(args.runs):
            v = settings(prefix, "fetch-%d" % i, endpoint, python, "bench/big", "big")
            elapsed, out = play(prefix, v)
            res = task_result(out, "Fetch the models from their source")
            seconds = res["progress"]["elapsed"]
            program_s.append(seconds)
            task_s.append(res["task_s"])
            print("run %d: fetch program %.2f s (%.1f MB/s), the fetch task %.2f s (%.1f MB/s), play %.2f s" % (
                i + 1, seconds, total / seconds / 1e6, res["task_s"], total / res["task_s"] / 1e6, elapsed))
            shutil.rmtree(os.path.join(prefix, "fetch-%d" % i))
        fetch_s = statistics.median(program_s)

        print("== no-op: a model of %d files" % len(many))
        v = settings(prefix, "noop", endpoint, python, "bench/many", "many")
        play(prefix, v)
        look_params = dict((k, d.get("default")) for k, d in sglang_weights.ARGUMENT_SPEC.items())
        look_params.update(models=v["sglang_model_models"], state_dir=v["sglang_model_state_dir"], group="root",
                           file_mode="0640", dir_mode="0750")
        look_ms = []
        for _ in range(20):
            t0 = time.perf_counter()
            assert sglang_weights.look(look_params)["in_place"]
            look_ms.append((time.perf_counter() - t0) * 1000)
        module_args = {"models": v["sglang_model_models"], "state_dir": v["sglang_model_state_dir"],
                       "python": python, "group": "root", "file_mode": "0640", "dir_mode": "0750"}
        module_s, role_s, empty_s = [], [], []
        empty = os.path.join(prefix, "empty.yml")
        with open(empty, "w") as fh:
            fh.write(EMPTY)
        for _ in range(args.noop_runs):
            t0 = time.monotonic()
            proc = subprocess.run([os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
                                   "-e", "ansible_python_interpreter=%s" % sys.executable, "--check", "-m",
                                   "sglang_model", "-a", json.dumps(module_args)], cwd=REPO, env=env(),
                                  capture_output=True, text=True, check=False)
            module_s.append(time.monotonic() - t0)
            assert '"changed": false' in proc.stdout, proc.stdout[-2000:]
            elapsed, out = play(prefix, v)
            assert out["stats"]["localhost"]["changed"] == 0
            role_s.append(elapsed)
            empty_s.append(play(prefix, {}, playbook=empty)[0])
        print("look (in process): median %.1f ms over 20" % statistics.median(look_ms))
        print("module check-mode call (ansible ad hoc): median %.2f s; role play: median %.2f s; empty play: "
              "median %.2f s (%d runs each)" % (statistics.median(module_s), statistics.median(role_s),
                                                statistics.median(empty_s), args.noop_runs))
        print("fetch_mb_s=%.1f fetch_task_mb_s=%.1f bytes=%d files=%d" % (
            total / fetch_s / 1e6, total / statistics.median(task_s) / 1e6, total, len(big)))
        print("noop_files=%d look_ms=%.1f module_call_s=%.2f role_play_s=%.2f empty_play_s=%.2f" % (
            len(many), statistics.median(look_ms), statistics.median(module_s), statistics.median(role_s),
            statistics.median(empty_s)))
    finally:
        for s in servers:
            s.shutdown()
        shutil.rmtree(prefix, ignore_errors=True)


if __name__ == "__main__":
    main()
