"""Figures of the playbook runs on the H200, read from what tests/gpu/playbook_h200.sh brought back (TEST-ONLY).

    python3 tests/gpu/playbook_figures.py tests/data/h200-playbook

Reads runs.jsonl (one line per ansible-playbook run), console/<run>.console.txt (or <run>.console.txt, as
playbook_h200.sh leaves them: the console, every line prefixed
with the wall clock when it was printed), log_stamps.tsv (every server log line with the wall clock when a 2 ms
poller saw it) and, where kept, <run>.status.json (the supervisor's status file after the run, in results/ or the
top directory), and prints one JSON object per run:
  seconds            the whole ansible-playbook run (wall clock)
  changed, pid_*     PLAY RECAP's changed count, the server PID before and after
  launch             wait_for_model's `elapsed` for a (re)start: launch to ready (or to the crash verdict)
  ready_to_return    the server log's ready line -> the console line of the launch task's result
  crash_to_failure   the first line of the crash -> the run's last failed task (the launch, or the smoke's report)
  crash_to_verdict   the first line of the crash -> the supervisor's verdict (its status file's `updated`, the wall
                     clock when it wrote the verdict; <run>.status.json, which play_lib.sh keeps after every run)
  verdict_to_result  the supervisor's failure verdict -> the console line of the launch task's result (a start that
                     ended on a failure of this attempt; a serving supervisor rewrites its status, so not for ready)
  stop_old_s         the stop of the old server before a restart (SIGTERM to the whole tree until no process is
                     left): the launch's `stopped.seconds`, in the role's report line (older captures: the task
                     "Stop our old server")
  gpu_release_s      after that stop -> GPU memory below the threshold (the launch's `gpu_release.seconds`, in the
                     role's report line; older captures: gpu_facts)
"""

import json
import os
import re
import sys

LAUNCH = "TASK [sglang_server : Launch SGLang and wait for health]"
RESULT = re.compile(r"^(\d+\.\d+) (ok|changed|fatal): \[localhost\]")


def console(path):
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            stamp, _, text = line.rstrip("\n").partition(" ")
            yield float(stamp), text


def launch_result(lines):
    """(stamp, status, {elapsed, log_path}) of the launch task's result, or None when the run had none."""
    for i, (_, text) in enumerate(lines):
        if text.startswith(LAUNCH):
            for stamp, body in lines[i + 1:]:
                m = RESULT.match("%.3f %s" % (stamp, body))
                if m:
                    j = lines.index((stamp, body))
                    keys = {}
                    for _, kv in lines[j + 1:j + 400]:
                        m2 = re.match(r"^    (elapsed|log_path|attempt|crash_class): (.*)$", kv)
                        if m2 and m2.group(1) not in keys:
                            keys[m2.group(1)] = m2.group(2)
                        if RESULT.match("0.0 " + kv) or kv.startswith("TASK ["):
                            break
                    return stamp, m.group(2), keys
    return None


def status_of(root, run):
    """The supervisor's status file as the run left it (play_lib.sh keeps it), or {}."""
    for path in (os.path.join(root, "results", run + ".status.json"), os.path.join(root, run + ".status.json")):
        try:
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
        except (OSError, ValueError):
            continue
    return {}


def stamps(path):
    out = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            stamp, name, text = line.rstrip("\n").split("\t", 2)
            out.append((float(stamp), name, text))
    return out


def figures(root):
    logs = stamps(os.path.join(root, "log_stamps.tsv"))
    rows = []
    with open(os.path.join(root, "runs.jsonl"), encoding="utf-8") as handle:
        runs = [json.loads(line) for line in handle if line.strip()]
    for run in runs:
        path = os.path.join(root, "console", run["run"] + ".console.txt")
        lines = list(console(path if os.path.exists(path) else os.path.join(root, run["run"] + ".console.txt")))
        row = {"run": run["run"], "rc": run["rc"], "seconds": run["seconds"],
               "changed": int(re.search(r"changed=(\d+)", run["recap"]).group(1)),
               "pid_before": run["pid_before"], "pid_after": run["pid_after"],
               "gpu_mib_before": int(run["gpu_mib_before"]), "gpu_mib_after": int(run["gpu_mib_after"])}
        stop_task = False
        for _, text in lines:
            m = re.search(r"GPU memory back below (\d+) MiB after ([\d.]+) s", text)
            if m:
                row["gpu_release_s"] = float(m.group(2))
            m = re.search(r"old server stopped \([^)]*\) in ([\d.]+) s", text)
            if m:
                row["stop_old_s"] = float(m.group(1))
            if text.startswith("TASK ["):
                stop_task = text.startswith("TASK [sglang_server : Stop our old server")
            m = re.match(r"^        seconds: ([\d.]+)$", text)
            if stop_task and m:
                row["stop_old_s"] = float(m.group(1))
        res = launch_result(lines)
        if res and "log_path" in res[2]:
            stamp, status, keys = res
            log = os.path.basename(keys["log_path"])
            row.update(launch=float(keys["elapsed"]), log=log, status=status)
            mine = [(s, t) for s, n, t in logs if n == log]
            ready = [s for s, t in mine if "The server is fired up and ready to roll" in t]
            crash = [s for s, t in mine if "Scheduler hit an exception" in t or t.startswith("Traceback")]
            if status == "changed" and ready:
                row["ready_to_return"] = round(stamp - ready[0], 3)
            fatal = [s for s, t in lines if t.startswith("fatal: [localhost]")]
            if crash and fatal:
                row["crash_to_failure"] = round(fatal[-1] - crash[0], 3)
                row["crash_class"] = keys.get("crash_class") or next(
                    (t.split(": ", 1)[1] for _, t in lines if t.startswith("crash class: ")), None)
            st = status_of(root, run["run"])
            if (status in ("changed", "fatal") and st.get("verdict") and isinstance(st.get("updated"), (int, float))
                    and str(st.get("attempt")) == keys.get("attempt", str(st.get("attempt")))):
                row["verdict"] = st["verdict"]
                if st["verdict"] != "ready":  # a serving supervisor rewrites its status later: `updated` is no verdict
                    row["verdict_to_result"] = round(stamp - st["updated"], 3)
                    if crash:
                        row["crash_to_verdict"] = round(st["updated"] - crash[0], 3)
        rows.append(row)
    return rows


def main():
    for row in figures(sys.argv[1]):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
