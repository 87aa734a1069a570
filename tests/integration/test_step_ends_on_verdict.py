"""A start that fails in a later step of the action plugin, with real processes (TEST: the emulator, the supervisor
program, ``ansible`` running the module in 2 s steps). The emulator's first request logs a scheduler crash and every
process stays alive (crash_hang); the health URL is a socket that takes every connection and never answers, and
outlives the server's tree, as SGLang 0.5.17's leader holds /health_generate for seconds after its scheduler died.
The supervisor decides HANG_BOUND after the crash line, and the step under way ends on its verdict: the task fails
within a second of it, never after a health request of the step's own that the server holds (health_timeout)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import urllib.request

from ansible_run import BIN, EMULATOR, REPO, TARGET_PYTHON, free_port, installed_program, run_module


def _first_request(port):
    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % port, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=30).read()
    except Exception:  # noqa: BLE001 - its decode crashes: no answer is the point
        pass


def _logged(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def test_a_verdict_in_a_later_step_fails_the_task_within_a_second(tmp_path):
    log_dir = str(tmp_path / "logs")
    os.makedirs(log_dir)
    port = free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1024)
    args = {"name": "stepv", "log_dir": log_dir, "launcher": "detached", "timeout": 120, "stall_timeout": 60,
            "port": port, "health_url": "http://127.0.0.1:%d/health_generate" % holder.getsockname()[1],
            "step_time": 2, "argv": [TARGET_PYTHON, EMULATOR, "--port", str(port), "--emulator-scenario", "crash_hang",
                                     "--emulator-load-seconds", "0.3", "--emulator-capture-seconds", "0.1"],
            "program_dir": installed_program("wait_for_model")}
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % TARGET_PYTHON, "-m", "wait_for_model", "-a", json.dumps(args)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while b"The server is fired up" not in _logged(os.path.join(log_dir, "stepv_r1.log")):
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(3.0)  # a later step: the first one (2 s) ended pending, the server not healthy
        threading.Thread(target=_first_request, args=(port,), daemon=True).start()
        out, err = proc.communicate(timeout=60)
        ended = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
        holder.close()
        run_module("wait_for_model", {"name": "stepv", "state": "stopped", "log_dir": log_dir})
    result = json.loads(out)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result.get("failed") is True and result["crash_class"] == "cuda_error", result
    assert result["steps"] >= 2, result  # the verdict came in a later step
    assert result["evidence"].startswith("our health request got no answer for 1.5 s after the crash line"), result
    with open(os.path.join(log_dir, "stepv.status.json")) as fh:
        status = json.load(fh)
    # the verdict's write (the supervisor's wall clock) -> ansible's exit, its result printed: within a second
    assert ended - status["updated"] < 1.0, (ended - status["updated"], result["steps"])
