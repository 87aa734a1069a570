"""The real wait_for_model module, run by Ansible, against the real SGLang emulator (real processes)."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from ansible.module_utils import sglang_proc

from ansible_run import EMULATOR, TARGET_PYTHON, free_port, run_module

CORPUS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "sglang-logs")


@pytest.fixture
def server(tmp_path):
    """Module arguments for an emulator on a free port; stops whatever is left at the end."""
    port = free_port()
    log_dir = str(tmp_path / "logs")
    os.makedirs(log_dir)

    def args(scenario="normal", extra=(), **kw):
        a = {
            "name": "emu",
            "argv": [TARGET_PYTHON, EMULATOR, "--port", str(port), "--model-path", "/models/tiny",
                     "--emulator-scenario", scenario, "--emulator-load-seconds", "1",
                     "--emulator-capture-seconds", "0.3"] + list(extra),
            "log_dir": log_dir,
            "health_url": "http://127.0.0.1:%d/health_generate" % port,
            "timeout": 60,
            "stall_timeout": 20,
        }
        a.update(kw)
        return a
    args.port = port
    args.log_dir = log_dir
    yield args
    run_module("wait_for_model", {"name": "emu", "state": "stopped", "log_dir": log_dir, "on_foreign_pid": "ignore"})


def tree_pids(log_dir):
    state = sglang_proc.read_state(log_dir, "emu")
    return set(sglang_proc.our_tree(state)) if state else set()


def test_normal_start_is_idempotent_and_stop_ends_the_tree(server):
    r = run_module("wait_for_model", server())
    assert not r.get("failed"), r.get("msg")
    assert r["changed"] is True
    with open(r["log_path"]) as fh:
        assert fh.readline().startswith("[EMULATOR] ")  # the test double's banner: the module does not know it
    assert [p["phase"] for p in r["phases"]] == ["launching", "loading_weights", "kv_cache", "cuda_graph", "warmup", "ready"]
    pids = tree_pids(server.log_dir)
    state = sglang_proc.read_state(server.log_dir, "emu")
    assert len(pids) >= 3, (sglang_proc.why_not_ours(state), state, open(r["log_path"]).read()[-2000:])
    # the parent, a scheduler and a detokenizer
    assert os.readlink(os.path.join(server.log_dir, "emu.log")) == "emu_r1.log"

    again = run_module("wait_for_model", server())
    assert again["changed"] is False and again["pid"] == r["pid"]

    check = run_module("wait_for_model", server(extra=["--tp-size", "2"]), check=True)
    assert check["changed"] is True and check["restart_reason"] == "fingerprint changed: argv"
    assert tree_pids(server.log_dir) == pids  # check mode touched nothing

    stop = run_module("wait_for_model", {"name": "emu", "state": "stopped", "log_dir": server.log_dir})
    assert stop["changed"] is True
    assert not any(sglang_proc.pid_alive(p) for p in pids)


def test_changed_argument_restarts_exactly_once(server):
    first = run_module("wait_for_model", server())
    second = run_module("wait_for_model", server(extra=["--mem-fraction-static", "0.8"]))
    third = run_module("wait_for_model", server(extra=["--mem-fraction-static", "0.8"]))
    assert second["changed"] is True and second["attempt"] == 2
    assert first["pid"] in second["stopped"]["signalled"]
    assert third["changed"] is False and third["pid"] == second["pid"]


def test_crash_while_loading_is_decided_by_the_log_not_the_clock(server):
    r = run_module("wait_for_model", server("crash_loading"))
    assert r["failed"] and r["crash_class"] == "cuda_oom"
    assert "OutOfMemoryError" in r["crash_exception"]
    assert r["msg"].startswith("server crashed: cuda_oom")
    assert "Scheduler hit an exception" in r["deciding_line"]  # the log classifier decided, not a stall or a timeout
    assert r["phase"] != "ready"


def test_hang_is_a_stall(server):
    r = run_module("wait_for_model", server("hang", stall_timeout=3))
    assert r["failed"] and r["crash_class"] == "stalled"
    assert 3 <= r["elapsed"] < 5
    assert not tree_pids(server.log_dir)  # stop_on_failure: the hung tree was stopped


def test_health_503_forever_times_out_not_stalls(server):
    r = run_module("wait_for_model", server("health_503", timeout=5, stall_timeout=2))
    assert r["failed"] and r["crash_class"] == "timeout"
    assert r["phase"] == "ready"  # the log says ready; HTTP says no: HTTP decides


def test_port_taken_is_port_in_use(server):
    r = run_module("wait_for_model", server("port_taken"))
    assert r["failed"] and r["crash_class"] == "port_in_use"


def test_foreign_listener_on_port_is_refused_and_left_alive(server):
    holder = subprocess.Popen([TARGET_PYTHON, "-c",
                               "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', %d)); s.listen(1); time.sleep(60)"
                               % server.port])
    try:
        deadline = time.monotonic() + 5
        while not sglang_proc.listeners(server.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        r = run_module("wait_for_model", server())
        assert r["failed"] and ("port %d is held by a process that is not ours" % server.port) in r["msg"]
        assert str(holder.pid) in r["msg"]
        assert holder.poll() is None
        assert not os.path.exists(os.path.join(server.log_dir, "emu.json"))
    finally:
        holder.kill()
        holder.wait()


def test_child_killed_while_parent_lives_is_child_died_before_the_load_ends(server):
    killed = {}

    def killer():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = sglang_proc.read_state(server.log_dir, "emu")
            if state and sglang_proc.state_is_alive_and_ours(state):
                kids = [p for p, i in sglang_proc.process_table().items() if i["ppid"] == state["pid"]]
                if len(kids) >= 2:
                    time.sleep(2.5)  # the children are long-lived by now (child_grace is 2 s)
                    os.kill(kids[0], signal.SIGKILL)
                    killed["pid"] = kids[0]
                    return
            time.sleep(0.05)
    th = threading.Thread(target=killer)
    th.start()
    r = run_module("wait_for_model", server("normal", extra=["--emulator-load-seconds", "8"]))
    th.join()
    assert killed, "the test could not find the emulator's children"
    assert r["failed"] and r["crash_class"] == "child_died"
    assert r["dead_child_pid"] == killed["pid"]
    assert r["phase"] != "ready"  # caught by the children watcher while the server still loaded


@pytest.mark.parametrize("log, cls", [
    ("026-crash-kimi-k25-tp8-cuda-graph-capture-typeerror.log", "cuda_graph_capture"),
    ("003-crash-not-enough-memory-mem-fraction.log", "kv_pool_oom"),
    ("010-crash-warmup-failed-502-after-uvicorn.log", "warmup_failed"),
])
def test_replayed_real_logs_are_classified(server, log, cls):
    r = run_module("wait_for_model", server("replay", extra=["--emulator-replay", os.path.join(CORPUS, log),
                                                              "--emulator-replay-speed", "1000"]))
    assert r["failed"] and r["crash_class"] == cls


def test_replayed_ready_log_at_warning_level_is_ready_by_http(server):
    r = run_module("wait_for_model", server("replay", extra=[
        "--emulator-replay", os.path.join(CORPUS, "046-ready-eagle3-log-level-warning-no-ready-line.log"),
        "--emulator-replay-speed", "1000"]))
    assert not r.get("failed"), r.get("msg")


def test_a_serving_server_whose_supervisor_was_killed_gets_one_back_that_watches_it(server):
    """detached: kill -9 of the supervisor program leaves the server serving; the next run says so and puts a
    supervisor back without a restart, and that one decides when a worker of the server then dies."""
    r = run_module("wait_for_model", server())
    assert not r.get("failed"), r.get("msg")
    state = sglang_proc.read_state(server.log_dir, "emu")
    leader, supervisor = state["pid"], state["watcher"]["pid"]
    assert supervisor == r["supervisor_pid"] and sglang_proc.pid_alive(supervisor)
    os.kill(supervisor, signal.SIGKILL)
    end = time.monotonic() + 10
    while sglang_proc.pid_alive(supervisor) and time.monotonic() < end:
        time.sleep(0.05)  # a child of ours while the module ran; now reaped by init
    again = run_module("wait_for_model", server())
    assert not again.get("failed"), again.get("msg")
    assert again["supervisor"] == "restored" and again["pid"] == leader, again  # no restart
    assert any("a supervisor was put back" in w for w in again.get("warnings", [])), again.get("warnings")
    state = sglang_proc.read_state(server.log_dir, "emu")
    assert state["watcher"]["pid"] == again["supervisor_pid"] != supervisor
    # the adopted server is watched: a worker's death is a failure, the tree is stopped
    workers = [p for p in sglang_proc.our_tree(state) if p != leader
               and "spawn_main" in " ".join(sglang_proc.proc_cmdline(p) or [])]
    assert workers
    os.kill(workers[0], signal.SIGKILL)
    end = time.monotonic() + 20
    st = None
    while time.monotonic() < end:
        st = sglang_proc.read_json(server.log_dir, "emu.status.json")
        if st and st.get("verdict") not in (None, "ready"):
            break
        time.sleep(0.1)
    assert st["verdict"] in ("child_died", "child_sigquit", "killed"), st
    assert st["report"]["evidence"] == "worker PID %d of the server died" % workers[0]
    end = time.monotonic() + 20
    while sglang_proc.pid_alive(leader) and time.monotonic() < end:
        time.sleep(0.1)
    assert not sglang_proc.pid_alive(leader)  # the adopted supervisor stopped the failed tree
