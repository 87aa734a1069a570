"""The host watcher program with real SGLang on the lent H200 (TEST-ONLY; run by playbook_h200.sh part w, as root).

The device has no systemd as PID 1, so this script plays systemd's part for the watcher: it installs the program
(module_utils/sglang_supervisor.py and the files it imports) into <run_dir>/supervisor as the role sglang_server does,
writes its 0600 config from the server the playbook ran (its argv and environment, read from /proc before that
server was stopped),
listens on a NOTIFY_SOCKET and stamps every message, then:
  1. waits for READY=1 (the watcher sends it once /health_generate answered 200) and asks /generate itself;
  2. kill -9 of the scheduler: the watcher must exit 69 (a serving server died) with its class in the status file;
  3. greps the log dir for the API key (the watcher's redaction).
Writes $OUT-side evidence into the directory given as argv[1]: notify.tsv, watcher.stderr.txt, status.json, result.json.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

EV, P, RUNDIR, LOGDIR, KEY = sys.argv[1:6]
sys.path.insert(0, os.path.join(P, "tests", "integration"))
import ansible.module_utils  # noqa: E402

ansible.module_utils.__path__.append(os.path.join(P, "module_utils"))  # the project's module_utils, as tests do
from ansible.module_utils import sglang_contract, sglang_proc, sglang_program  # noqa: E402
from installed_programs import install_supervisor  # noqa: E402 - as the role sglang_server installs it

NAME = "sglang"
saved = json.load(open(os.path.join(EV, "server_before_stop.json")))
program = install_supervisor(RUNDIR)
port = saved["port"]
config = {
    "launch": "h200", "argv": saved["cmdline"], "env": saved["env"], "chdir": LOGDIR, "user": "sglang",
    "log_dir": LOGDIR, "health_url": "http://127.0.0.1:%d/health_generate" % port,
    "headers": {"Authorization": "Bearer %s" % KEY}, "secrets": [KEY], "fingerprint": "h200", "fingerprint_parts": {},
    "port": port, "keep_attempts": 20, "unit": None, "timeout": 0, "stop_timeout": 30, "tail_lines": 30,
    "settings": {"health_interval": 0.25, "health_timeout": 10, "unhealthy_after": 3, "child_grace": 2.0,
                 "settle_time": 0.3, "stall_timeout": 900, "poll_interval": 0.1, "extend_timeout": 960},
}
sglang_proc.write_files(RUNDIR, ((sglang_contract.CONFIG % NAME, json.dumps(config)),), mode=0o600)
sock_path = "/run/eagle-notify.sock"
if os.path.exists(sock_path):
    os.unlink(sock_path)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(sock_path)
sock.settimeout(0.5)
notes = open(os.path.join(EV, "notify.tsv"), "w")
err = open(os.path.join(EV, "watcher.stderr.txt"), "w")
journal = open(os.path.join(EV, "watcher.stdout.txt"), "w")
t0 = time.time()
proc = subprocess.Popen(sglang_program.argv(sys.executable, program, RUNDIR, NAME),
                        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NOTIFY_SOCKET": sock_path},
                        stdout=journal, stderr=err, start_new_session=True)
result = {"watcher_pid": proc.pid, "launched_at": t0}


def pump(until, limit):
    end = time.time() + limit
    while time.time() < end:
        try:
            msg = sock.recv(65536).decode()
        except socket.timeout:
            if proc.poll() is not None:
                return None
            continue
        now = time.time()
        notes.write("%.3f\t%.3f\t%s\n" % (now, now - t0, msg.replace("\n", " | ")))
        notes.flush()
        if until in msg:
            return now
    return None


ready = pump("READY=1", 480)
result["ready_after_s"] = None if ready is None else round(ready - t0, 2)
status = sglang_proc.read_json(RUNDIR, sglang_contract.STATUS % NAME) or {}
result["status_at_ready"] = {k: status.get(k) for k in ("verdict", "phase", "phases", "attempt", "server_pid")}
if ready is not None:
    body = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 16, "temperature": 0}})
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % port, data=body.encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer %s" % KEY})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            result["generate"] = {"status": resp.status, "text": json.loads(resp.read()).get("text")}
    except Exception as e:  # noqa: BLE001 - evidence, whatever it is
        result["generate"] = {"error": repr(e)}
    state = sglang_proc.read_state(RUNDIR, NAME)
    tree = sglang_proc.our_tree(state)
    sched = [p for p in tree if "scheduler" in " ".join(sglang_proc.proc_cmdline(p) or [])]
    result["tree"] = {p: " ".join(sglang_proc.proc_cmdline(p) or [])[:120] for p in tree}
    if sched:
        result["killed_scheduler"] = sched[0]
        k0 = time.time()
        os.kill(sched[0], signal.SIGKILL)
        pump("failed:", 120)
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            rc = None
        result.update(exit_status=rc, exit_after_kill_s=round(time.time() - k0, 2))
if proc.poll() is None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
result["final_exit_status"] = proc.returncode
status = sglang_proc.read_json(RUNDIR, sglang_contract.STATUS % NAME) or {}
json.dump(status, open(os.path.join(EV, "status.json"), "w"), indent=1)
rep = status.get("report") or {}
result["final"] = {"verdict": status.get("verdict"), "crash_class": rep.get("crash_class"),
                   "evidence": rep.get("evidence"), "exit_status": rep.get("exit_status"),
                   "after_ready": rep.get("after_ready"), "hint": rep.get("hint")}
hits = subprocess.run(["grep", "-rl", "--", KEY, LOGDIR], capture_output=True, text=True).stdout.split()
result["key_in_files_under_log_dir"] = hits
journal.close()
result["key_in_journal_copy"] = KEY in open(os.path.join(EV, "watcher.stdout.txt")).read()
json.dump(result, open(os.path.join(EV, "watcher_result.json"), "w"), indent=1)
print(json.dumps(result, indent=1)[:4000])
