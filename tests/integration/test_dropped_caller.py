"""A caller that goes away mid-wait (the SSH connection dropped; here: Ansible's own processes killed) ends the
module's wait within a poll and lets the lock go, never the server: the next run attaches to the same attempt and
sees the load through. Real processes: ansible, the module, the SGLang emulator."""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time

from ansible.module_utils import sglang_proc

from ansible_run import BIN, EMULATOR, REPO, TARGET_PYTHON, free_port, installed_program, run_module


def test_the_wait_ends_with_its_caller_and_the_next_run_attaches(tmp_path):
    port = free_port()
    log_dir = str(tmp_path / "logs")
    os.makedirs(log_dir)
    args = {"name": "emu", "launcher": "detached", "log_dir": log_dir, "timeout": 120, "stall_timeout": 60,
            "argv": [TARGET_PYTHON, EMULATOR, "--port", str(port), "--model-path", "/models/tiny",
                     "--emulator-load-seconds", "14", "--emulator-shards", "7", "--emulator-capture-seconds", "0.3"],
            "health_url": "http://127.0.0.1:%d/health_generate" % port,
            "program_dir": installed_program("wait_for_model")}
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_LIBRARY=os.path.join(REPO, "library"),
               ANSIBLE_MODULE_UTILS=os.path.join(REPO, "module_utils"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    # progress: false = one module call that waits for the whole load (the longest wait a caller can leave behind)
    caller = subprocess.Popen(
        [os.path.join(BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-e",
         "ansible_python_interpreter=%s" % TARGET_PYTHON, "-m", "wait_for_model",
         "-a", json.dumps(dict(args, progress=False))],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        state = None
        end = time.monotonic() + 30
        while time.monotonic() < end:
            state = sglang_proc.read_state(log_dir, "emu")
            if state and state.get("pid"):
                break
            time.sleep(0.2)
        assert state and sglang_proc.state_is_alive_and_ours(state)
        time.sleep(2)  # the module is waiting now, the emulator loading
        table = sglang_proc.process_table()
        session = {caller.pid}  # ansible and every process it started (descendants by parent PID)
        grew = True
        while grew:
            more = set(pid for pid, info in table.items() if info["ppid"] in session) - session
            session |= more
            grew = bool(more)
        module = [pid for pid in session if sglang_proc.proc_cmdline(pid) == [TARGET_PYTHON]]
        assert len(module) == 1, [(p, sglang_proc.proc_cmdline(p)) for p in session]
        below = set(module)  # the module and what it started (the server) stay
        grew = True
        while grew:
            more = set(pid for pid, info in table.items() if info["ppid"] in below) - below
            below |= more
            grew = bool(more)
        for pid in session:
            if pid not in below:
                os.kill(pid, signal.SIGKILL)  # the caller's side is gone; the module itself is not signalled
        t0 = time.monotonic()
        while sglang_proc.pid_alive(module[0]) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        gone_after = time.monotonic() - t0
        assert not sglang_proc.pid_alive(module[0]), "the module went on waiting for nobody"
        assert gone_after < 2.0
        with open(os.path.join(log_dir, "emu.lock")) as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go at once
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        assert sglang_proc.state_is_alive_and_ours(state)  # the server loads on
        again = run_module("wait_for_model", args)
        assert again.get("failed") is not True, again
        assert again["changed"] is False and again["attempt"] == state["attempt"] and again["pid"] == state["pid"]
    finally:
        if caller.poll() is None:
            caller.kill()
        caller.wait()
        run_module("wait_for_model", {"name": "emu", "state": "stopped", "log_dir": log_dir, "launcher": "detached"})
