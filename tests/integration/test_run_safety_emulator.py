"""wait_for_model run by Ansible with real processes: two runs at once, a process tree that escapes its
session, bad input next to a healthy server, forged run state."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from ansible.module_utils import sglang_proc

from ansible_run import EMULATOR, TARGET_PYTHON, free_port, run_module

# A tiny server: answers 200 on any GET, says it is ready, and has a child that double-forks a
# grandchild which calls setsid (it leaves the session and is re-parented away from the tree). The
# grandchild writes its PID to GRANDCHILD_FILE; a plain child (same session) writes to CHILD_FILE.
ESCAPER = r"""
import http.server, os, sys, time
port, gfile, cfile, escape = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
if os.fork() == 0:
    if os.fork() == 0:
        if escape:
            os.setsid()
        with open(gfile + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.rename(gfile + ".tmp", gfile)
        while True:
            time.sleep(1)
    os._exit(0)
if os.fork() == 0:
    with open(cfile + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.rename(cfile + ".tmp", cfile)
    while True:
        time.sleep(1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", port), H)
print("The server is fired up and ready to roll!", flush=True)
srv.serve_forever()
"""


def _alive(pid):
    return sglang_proc.pid_alive(pid)


def _wait_file(path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(path) as fh:
        return int(fh.read())


@pytest.fixture
def dirs(tmp_path):
    log_dir = str(tmp_path / "logs")
    run_dir = str(tmp_path / "run")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    started = []
    yield {"log_dir": log_dir, "run_dir": run_dir, "tmp": str(tmp_path), "pids": started}
    run_module("wait_for_model", {"name": "safe", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir,
                                  "on_foreign_pid": "ignore"})
    for pid in started:  # whatever a failed test left behind (our own test processes only)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize("cgroup", [True, False])
def test_stop_leaves_nothing_behind(dirs, cgroup):
    port = free_port()
    gfile, cfile = os.path.join(dirs["tmp"], "grandchild.pid"), os.path.join(dirs["tmp"], "child.pid")
    script = os.path.join(dirs["tmp"], "escaper.py")
    with open(script, "w") as fh:
        fh.write(ESCAPER)
    # With our own cgroup the grandchild may escape its session; without one, only a grandchild that
    # stays in the session can be found (the session path is what such a host has).
    escape = "1" if cgroup else "0"
    r = run_module("wait_for_model", {
        "name": "safe", "argv": [TARGET_PYTHON, script, str(port), gfile, cfile, escape], "log_dir": dirs["log_dir"],
        "run_dir": dirs["run_dir"], "health_url": "http://127.0.0.1:%d/health_generate" % port, "timeout": 30,
        "cgroup": cgroup})
    assert not r.get("failed"), r.get("msg")
    grandchild, child = _wait_file(gfile), _wait_file(cfile)
    dirs["pids"].extend([grandchild, child, r["pid"]])
    if cgroup and r["tree_tracking"] != "cgroup":
        pytest.skip("this host gives the server no cgroup of its own: %s" % r.get("tree_tracking_note"))
    assert r["tree_tracking"] == ("cgroup" if cgroup else "session")
    if cgroup:
        assert sglang_proc.process_table()[grandchild]["sid"] != r["pid"]  # it really left the session
    state = sglang_proc.read_state(dirs["run_dir"], "safe")
    assert {grandchild, child, r["pid"]} <= set(sglang_proc.our_tree(state))

    stop = run_module("wait_for_model", {"name": "safe", "state": "stopped", "log_dir": dirs["log_dir"],
                                         "run_dir": dirs["run_dir"], "stop_timeout": 5})
    assert stop["changed"] is True
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in (grandchild, child, r["pid"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in (grandchild, child, r["pid"]))
    if cgroup:
        cg = state["cgroup"]
        assert not os.path.exists(os.path.join(cg["mount"], cg["path"].lstrip("/")))  # our cgroup is removed too


def _emulator_args(dirs, server_port, load="2", **kw):
    a = {
        "name": "safe",
        "argv": [TARGET_PYTHON, EMULATOR, "--port", str(server_port), "--model-path", "/models/tiny",
                 "--emulator-scenario", "normal", "--emulator-load-seconds", load, "--emulator-capture-seconds", "0.3"],
        "log_dir": dirs["log_dir"], "run_dir": dirs["run_dir"],
        "health_url": "http://127.0.0.1:%d/health_generate" % server_port, "timeout": 60, "stall_timeout": 20,
    }
    a.update(kw)
    return a


def _emulator_leaders(port):
    """Emulator parent processes listening on (or started for) this port, whoever launched them."""
    out = []
    for pid in sglang_proc.all_pids():
        cmd = sglang_proc.proc_cmdline(pid) or []
        if EMULATOR in cmd and "--port" in cmd and cmd[cmd.index("--port") + 1] == str(port) \
                and not any("multiprocessing" in c for c in cmd):
            out.append(pid)
    return out


def test_two_runs_at_once_launch_one_server(dirs):
    port = free_port()
    results = [None, None]

    def go(i):
        results[i] = run_module("wait_for_model", _emulator_args(dirs, port))
    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not any(r.get("failed") for r in results), [r.get("msg") for r in results]
    assert sorted(r["changed"] for r in results) == [False, True]  # one launched, the other found it healthy
    assert results[0]["pid"] == results[1]["pid"]
    assert _emulator_leaders(port) == [results[0]["pid"]]
    state = sglang_proc.read_state(dirs["run_dir"], "safe")
    assert state["pid"] == results[0]["pid"] and sglang_proc.state_is_alive_and_ours(state)
    stop = run_module("wait_for_model", {"name": "safe", "state": "stopped", "log_dir": dirs["log_dir"],
                                         "run_dir": dirs["run_dir"]})
    assert stop["changed"] is True and _emulator_leaders(port) == []


def test_a_run_that_cannot_get_the_lock_fails_naming_the_holder(dirs):
    port = free_port()
    first = {}
    # The first run loads for 20 s: the second (an Ansible start away, seconds on a loaded machine) finds it holding the lock.
    th = threading.Thread(target=lambda: first.update(run_module("wait_for_model", _emulator_args(dirs, port, load="20"))))
    th.start()
    try:
        lock = os.path.join(dirs["run_dir"], "safe.lock")
        deadline = time.monotonic() + 20
        while not (os.path.exists(lock) and os.path.getsize(lock)) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = run_module("wait_for_model", _emulator_args(dirs, port, load="20", lock_timeout=1))
        assert second["failed"] and "another run holds the lock for safe since" in second["msg"]
        assert "crash_class" not in second
    finally:
        th.join()
    assert not first.get("failed"), first.get("msg")
    assert _emulator_leaders(port) == [first["pid"]]


def test_bad_port_leaves_the_healthy_server_alone(dirs):
    port = free_port()
    r = run_module("wait_for_model", _emulator_args(dirs, port))
    assert not r.get("failed"), r.get("msg")
    bad = run_module("wait_for_model", _emulator_args(dirs, port, port=99999, force_restart=True))
    assert bad["failed"] and "port 99999 is out of range" in bad["msg"]
    bad = run_module("wait_for_model", _emulator_args(dirs, port, health_url="http://127.0.0.1:99999/health_generate",
                                                      force_restart=True))
    assert bad["failed"] and "health_url" in bad["msg"] and "Traceback" not in str(bad)
    assert _alive(r["pid"]) and sglang_proc.state_is_alive_and_ours(sglang_proc.read_state(dirs["run_dir"], "safe"))


def test_missing_binary_creates_no_log_file(dirs):
    r = run_module("wait_for_model", {"name": "safe", "argv": ["/nonexistent/bin/sglang"], "log_dir": dirs["log_dir"],
                                      "run_dir": dirs["run_dir"], "health_url": "http://127.0.0.1:%d/h" % free_port()})
    assert r["failed"] and "argv[0] /nonexistent/bin/sglang was not found" in r["msg"]
    assert os.listdir(dirs["log_dir"]) == []


def test_forged_state_in_a_service_user_writable_run_dir_signals_nothing(dirs):
    # The attack: the service user writes <name>.json naming a root process; here the victim is
    # a process of this test, recorded with its true identity, in a run dir others can write.
    victim = __import__("subprocess").Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    dirs["pids"].append(victim.pid)
    try:
        while sglang_proc.proc_cmdline(victim.pid) != [sys.executable, "-c", "import time; time.sleep(60)"]:
            time.sleep(0.01)
        sglang_proc.write_state(dirs["run_dir"], "safe", dict(sglang_proc.identity(victim.pid), fingerprint="x",
                                                              attempt=1, log_path="/etc/shadow"))
        os.chmod(dirs["run_dir"], 0o777)
        r = run_module("wait_for_model", {"name": "safe", "state": "stopped", "log_dir": dirs["log_dir"],
                                          "run_dir": dirs["run_dir"]})
        assert r["failed"] and "not trusted" in r["msg"]
        r = run_module("wait_for_model", {"name": "safe", "state": "watched", "log_dir": dirs["log_dir"],
                                          "run_dir": dirs["run_dir"]})
        assert r["failed"] and "root:" not in str(r.get("log_tail"))
        assert victim.poll() is None
    finally:
        os.chmod(dirs["run_dir"], 0o755)
        victim.kill()
        victim.wait()
        os.unlink(os.path.join(dirs["run_dir"], "safe.json"))


def test_no_launch_while_another_run_holds_the_lock(dirs):
    import fcntl
    port = free_port()
    fd = os.open(os.path.join(dirs["run_dir"], "safe.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    result = {}
    th = threading.Thread(target=lambda: result.update(run_module("wait_for_model", _emulator_args(dirs, port, load="1"))))
    th.start()
    try:
        time.sleep(8)  # the run is waiting for the lock (Ansible's start included): nothing may have been launched
        assert _emulator_leaders(port) == [] and not os.path.exists(os.path.join(dirs["run_dir"], "safe.json"))
    finally:
        os.close(fd)  # releases the lock: now it launches
        th.join()
    assert not result.get("failed"), result.get("msg")
    assert result["lock_wait"] >= 1 and _emulator_leaders(port) == [result["pid"]]
