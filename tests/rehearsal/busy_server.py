"""A busy server is not a dead one, through the playbook on the rehearsal (issue 33's "done when").

    .venv/bin/python tests/rehearsal/busy_server.py [--seconds 100] [--rerun-at 10]

Serves with ``playbooks/serve_eagle3.yml -i inventory/local`` (the SGLang emulator speaking SGLang 0.5.23's health:
a 20 s window for any output, health skipped and kept resident while busy, resident probes crash it as in #35884),
then puts the server into a long prefill: ``--seconds`` s with two requests running and no output at all, no log
line either. While it lasts the supervisor keeps probing and, at ``--rerun-at`` s, the playbook runs again (an
operator's re-run in the middle of the prefill). Then it checks, and prints as JSON:

- the server is still serving afterwards, with the same PID, and the re-run restarted nothing;
- no two of our health requests were ever inside the server at once (the emulator counts resident probes);
- the supervisor said ``busy`` while it lasted and ``ready`` again after.

Exit status 0 when all hold, 1 otherwise. It takes about ``--seconds`` + 3 minutes (one fresh converge). Not part of
the pytest suites: it costs minutes of idle waiting by design.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

from ansible_run import BIN, free_port  # noqa: E402 - the tests' helpers, importable once on sys.path


API_KEY = "local-rehearsal-key"  # inventory/local's sglang_server_api_key


def http(port, path, body=None, timeout=5):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method="GET" if body is None else "POST",
                                 headers={"Authorization": "Bearer %s" % API_KEY})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode() or "{}")


def playbook(prefix, port, name="serve_eagle3.yml"):
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", name), "-i", "inventory/local",
           "-e", "eagle_deploy_prefix=%s" % prefix, "-e", "sglang_server_port=%d" % port]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    return {"rc": proc.returncode, "seconds": round(time.monotonic() - start, 1), "out": proc.stdout + proc.stderr}


def recap(out):
    """The PLAY RECAP's counters of localhost ({'ok': .., 'changed': .., 'failed': ..})."""
    for line in reversed(out.splitlines()):
        if line.startswith("localhost") and "changed=" in line:
            return dict((k, int(v)) for k, v in (f.split("=") for f in line.split()[2:]))
    return {}


def read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def watch(port, run_dir, seconds, samples):
    """Sample the emulator's resident probes and the supervisor's status each second for ``seconds`` s."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            health = http(port, "/emulator/health_state")
        except OSError as exc:
            health = {"error": str(exc)}
        status = read(os.path.join(run_dir, "sglang.status.json"))
        activity = (status.get("serving") or {}).get("activity") or {}
        samples.append({"t": time.monotonic(), "health": health, "verdict": status.get("verdict"),
                        "activity": activity.get("state"), "status": status.get("status")})
        time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seconds", type=float, default=100.0, help="the prefill's length, no output at all (s)")
    ap.add_argument("--rerun-at", type=float, default=10.0, help="run the playbook again this far into it (s)")
    args = ap.parse_args()
    prefix = tempfile.mkdtemp(prefix="eagle-deploy-busy-")
    os.chmod(prefix, 0o755)  # the service user walks into the prefix
    port = free_port()
    run_dir = os.path.join(prefix, "var/lib/eagle-deploy/run")
    figures = {"prefill_seconds": args.seconds}
    try:
        first = playbook(prefix, port)
        figures["converge"] = {"rc": first["rc"], "seconds": first["seconds"]}
        if first["rc"] != 0:
            print(first["out"][-4000:])
            raise SystemExit(1)
        pid = read(os.path.join(run_dir, "sglang.json")).get("pid")
        http(port, "/emulator/long_prefill", {"seconds": args.seconds, "running": 2, "log_every": 0})
        t0 = time.monotonic()
        samples = []
        watcher = threading.Thread(target=watch, args=(port, run_dir, args.seconds + 60, samples))
        watcher.start()
        time.sleep(args.rerun_at)
        rerun = playbook(prefix, port)
        figures["rerun"] = {"rc": rerun["rc"], "seconds": rerun["seconds"], "recap": recap(rerun["out"]),
                            "started_at": args.rerun_at}
        watcher.join()
        after = read(os.path.join(run_dir, "sglang.json")).get("pid")
        busy = [s for s in samples if s["activity"] == "busy"]
        figures.update({
            "pid_before": pid, "pid_after": after, "same_pid": pid == after and os.path.exists("/proc/%d" % after),
            "most_resident": max([s["health"].get("most_resident", 0) for s in samples] or [0]),
            "most_open": max([s["health"].get("most_open", 0) for s in samples] or [0]),
            "verdicts": sorted({str(s["verdict"]) for s in samples}),
            "busy_seconds": round(busy[-1]["t"] - busy[0]["t"], 1) if busy else 0,
            "first_busy_after": round(busy[0]["t"] - t0, 1) if busy else None,
            "last_status": samples[-1]["status"] if samples else None,
            "emulator_errors": [s["health"]["error"] for s in samples if "error" in s["health"]][:3],
        })
        ok = (figures["same_pid"] and figures["most_resident"] <= 1 and figures["most_open"] <= 1
              and rerun["rc"] == 0 and figures["rerun"]["recap"].get("changed") == 0
              and figures["verdicts"] == ["ready"] and busy and samples[-1]["activity"] is None
              and not figures["emulator_errors"])
        figures["ok"] = bool(ok)
        print(json.dumps(figures, indent=1))
        if not ok:
            print(rerun["out"][-6000:])
        return 0 if ok else 1
    finally:
        stop = playbook(prefix, port, "stop.yml")
        if stop["rc"] != 0:
            print(stop["out"][-3000:])
        shutil.rmtree(prefix, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
