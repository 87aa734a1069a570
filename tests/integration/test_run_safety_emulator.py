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
        pytest.fail("this host gives the server no cgroup of its own: %s" % r.get("tree_tracking_note"))
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


# ------------------------------------------------------------------ ours is per deployment, and never by session id alone
def _stop(log_dir, run_dir, **kw):
    args = {"name": "safe", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir, "stop_timeout": 5}
    args.update(kw)
    return run_module("wait_for_model", args)


def _gone(pids, timeout=5.0):
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _second_deployment(dirs):
    log_dir, run_dir = os.path.join(dirs["tmp"], "logs2"), os.path.join(dirs["tmp"], "run2")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    return log_dir, run_dir


def test_two_deployments_of_one_name_have_their_own_cgroups_and_stops(dirs):
    port_a, port_b = free_port(), free_port()
    log_b, run_b = _second_deployment(dirs)
    a = run_module("wait_for_model", _emulator_args(dirs, port_a, load="1"))
    assert not a.get("failed"), a.get("msg")
    if a["tree_tracking"] != "cgroup":
        pytest.fail("this host gives the server no cgroup of its own: %s" % a.get("tree_tracking_note"))
    try:
        b = run_module("wait_for_model", _emulator_args(dirs, port_b, load="1", log_dir=log_b, run_dir=run_b))
        assert not b.get("failed"), b.get("msg")
        dirs["pids"].extend([a["pid"], b["pid"]])
        state_a, state_b = sglang_proc.read_state(dirs["run_dir"], "safe"), sglang_proc.read_state(run_b, "safe")
        assert b["tree_tracking"] == "cgroup" and state_a["cgroup"]["path"] != state_b["cgroup"]["path"]
        tree_b = set(sglang_proc.our_tree(state_b))
        assert len(tree_b) >= 3 and not tree_b & set(sglang_proc.our_tree(state_a))

        stop = _stop(dirs["log_dir"], dirs["run_dir"])
        assert stop["changed"] is True and _gone([a["pid"]]) and _emulator_leaders(port_a) == []
        assert all(_alive(p) for p in tree_b) and _emulator_leaders(port_b) == [b["pid"]]
        cg_b = state_b["cgroup"]
        assert os.path.isdir(os.path.join(cg_b["mount"], cg_b["path"].lstrip("/")))
        assert not os.path.exists(os.path.join(state_a["cgroup"]["mount"], state_a["cgroup"]["path"].lstrip("/")))
    finally:
        _stop(log_b, run_b)


def test_a_crashed_deployments_stop_never_reaches_the_same_named_one_started_after_it(dirs):
    # A's server dies on its own (its cgroup is left, empty); B, same name, other run dir, starts after it.
    # Stopping A (its record names its cgroup) must not signal B.
    port_a, port_b = free_port(), free_port()
    log_b, run_b = _second_deployment(dirs)
    a = run_module("wait_for_model", _emulator_args(dirs, port_a, load="1"))
    assert not a.get("failed"), a.get("msg")
    if a["tree_tracking"] != "cgroup":
        pytest.fail("this host gives the server no cgroup of its own: %s" % a.get("tree_tracking_note"))
    state_a = sglang_proc.read_state(dirs["run_dir"], "safe")
    for pid in sglang_proc.our_tree(state_a):
        os.kill(pid, signal.SIGKILL)
    assert _gone(list(sglang_proc.our_tree(state_a)) + [a["pid"]])
    try:
        b = run_module("wait_for_model", _emulator_args(dirs, port_b, load="1", log_dir=log_b, run_dir=run_b))
        assert not b.get("failed"), b.get("msg")
        dirs["pids"].append(b["pid"])
        tree_b = set(sglang_proc.our_tree(sglang_proc.read_state(run_b, "safe")))
        stop = _stop(dirs["log_dir"], dirs["run_dir"], on_foreign_pid="ignore")
        assert not stop.get("failed"), stop.get("msg")
        assert not stop.get("stopped", {}).get("signalled")
        time.sleep(0.5)
        assert all(_alive(p) for p in tree_b) and _emulator_leaders(port_b) == [b["pid"]]
    finally:
        _stop(log_b, run_b)


DAEMON = r"""
import os, sys, time
# A daemon that got the PID of our dead leader: start_new_session made it a session leader (its session id is
# that PID); it forks a worker and its first process exits, as daemons do.
if os.fork() == 0:
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(120)
    os._exit(0)
sys.stdin.read()  # exits when the test closes stdin
"""


def test_a_daemon_with_the_dead_leaders_session_id_is_never_signalled(dirs):
    import subprocess
    worker_file = os.path.join(dirs["tmp"], "worker.pid")
    leader = subprocess.Popen([sys.executable, "-c", DAEMON, worker_file], stdin=subprocess.PIPE, start_new_session=True)
    worker = _wait_file(worker_file)
    dirs["pids"].append(worker)
    try:
        while sglang_proc.proc_cmdline(leader.pid) != [sys.executable, "-c", DAEMON, worker_file]:
            time.sleep(0.01)
        # The record of our server whose leader had that PID (same identity: our leader was it, then it died).
        log_path = os.path.join(dirs["log_dir"], "safe_r1.log")
        open(log_path, "w").close()
        sglang_proc.write_state(dirs["run_dir"], "safe", dict(
            sglang_proc.identity(leader.pid), fingerprint="x", attempt=1, log_path=log_path, user="root",
            run_token="safe:" + "ab" * 16, tree_tracking="session", cgroup=None))
        leader.stdin.close()
        leader.wait()
        assert sglang_proc.process_table()[worker]["sid"] == leader.pid  # the worker holds the dead leader's session id
        stop = _stop(dirs["log_dir"], dirs["run_dir"])
        assert not stop.get("failed"), stop.get("msg")
        assert not stop.get("stopped", {}).get("signalled")
        assert _alive(worker)
        assert sglang_proc.read_state(dirs["run_dir"], "safe") is None  # the stale record is gone
    finally:
        os.kill(worker, signal.SIGKILL)


def test_orphans_of_our_own_dead_leader_are_found_by_the_run_token(dirs):
    # Session tracking only (no cgroup): the leader dies, its child and grandchild (same session) live on.
    port = free_port()
    gfile, cfile = os.path.join(dirs["tmp"], "grandchild.pid"), os.path.join(dirs["tmp"], "child.pid")
    script = os.path.join(dirs["tmp"], "escaper.py")
    with open(script, "w") as fh:
        fh.write(ESCAPER)
    r = run_module("wait_for_model", {
        "name": "safe", "argv": [TARGET_PYTHON, script, str(port), gfile, cfile, "0"], "log_dir": dirs["log_dir"],
        "run_dir": dirs["run_dir"], "health_url": "http://127.0.0.1:%d/health_generate" % port, "timeout": 30,
        "cgroup": False})
    assert not r.get("failed"), r.get("msg")
    grandchild, child = _wait_file(gfile), _wait_file(cfile)
    dirs["pids"].extend([grandchild, child, r["pid"]])
    token = sglang_proc.read_state(dirs["run_dir"], "safe")["run_token"]
    assert sglang_proc.proc_environ_has(grandchild, "EAGLE_DEPLOY_RUN", token)
    os.kill(r["pid"], signal.SIGKILL)
    assert _gone([r["pid"]])
    stop = _stop(dirs["log_dir"], dirs["run_dir"], on_foreign_pid="ignore")
    assert stop["changed"] is True and set(stop["stopped"]["signalled"]) == {child, grandchild}
    assert _gone([child, grandchild])


# ------------------------------------------------------------------ a run dir reached through a planted symlink
def test_a_planted_symlink_run_dir_leaves_the_server_alone(dirs):
    port = free_port()
    r = run_module("wait_for_model", _emulator_args(dirs, port, load="1"))
    assert not r.get("failed"), r.get("msg")
    home = os.path.join(dirs["tmp"], "home")
    os.mkdir(home)
    os.chown(home, 65534, 65534)  # the service user's home; it planted run -> our root-owned run dir
    os.symlink(dirs["run_dir"], os.path.join(home, "run"))
    stop = _stop(dirs["log_dir"], os.path.join(home, "run"))
    assert stop["failed"] and "above it is owned by uid 65534" in stop["msg"] and "nothing is signalled" in stop["msg"]
    os.chown(home, 0, 0)  # even in a root-owned directory, the symlink itself is refused
    stop = _stop(dirs["log_dir"], os.path.join(home, "run"))
    assert stop["failed"] and "is a symlink" in stop["msg"]
    assert _alive(r["pid"]) and _emulator_leaders(port) == [r["pid"]]


# ------------------------------------------------------------------ a launch that cannot run stops nothing
@pytest.mark.parametrize("python", ["gone", "false"])
def test_a_console_script_whose_python_cannot_run_leaves_the_old_server_alone(dirs, python):
    port = free_port()
    r = run_module("wait_for_model", _emulator_args(dirs, port, load="1"))
    assert not r.get("failed"), r.get("msg")
    venv_bin = os.path.join(dirs["tmp"], "venv", "bin")
    os.makedirs(venv_bin)
    # The venv's python: a link to a python that was removed, or to a program that does not start (exits 1).
    os.symlink("/usr/bin/python3.99-removed" if python == "gone" else "/bin/false", os.path.join(venv_bin, "python3"))
    script = os.path.join(venv_bin, "sglang-emulator")
    with open(script, "w") as fh:
        fh.write("#!%s\nimport runpy\n" % os.path.join(venv_bin, "python3"))
    os.chmod(script, 0o755)
    args = _emulator_args(dirs, port, load="1", force_restart=True)
    args["argv"] = [script] + args["argv"][2:]
    bad = run_module("wait_for_model", args)
    assert bad["failed"] and "Nothing was stopped or launched" in bad["msg"], bad["msg"]
    assert ("does not exist" if python == "gone" else "does not run as root") in bad["msg"]
    assert _alive(r["pid"]) and _emulator_leaders(port) == [r["pid"]]
    assert sorted(os.listdir(dirs["log_dir"])) == ["safe.log", "safe_r1.log"]
