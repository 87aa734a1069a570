"""`wait_for_model state=watched` against the SGLang emulator (real processes, run by Ansible): the watch waits on the
supervisor's status file and asks health itself; it follows neither the log nor the processes. A decode crash is
still caught with its class and traceback, a watch with nobody watching the server fails clearly, and a detached
server whose supervisor is gone is put back under one (kept when it answers, restarted when it does not)."""
from __future__ import annotations

import json
import os
import signal
import time
import urllib.request

import pytest

from ansible.module_utils import sglang_proc

from ansible_run import EMULATOR, TARGET_PYTHON, free_port, gone, install_sglang_files, run_module


@pytest.fixture(scope="module")
def sglang_root(tmp_path_factory):
    """An 'installed' sglang package dir holding the real 0.5.23 eagle_worker_v2.py and scheduler.py (the emulator's
    eagle scenario reads them)."""
    return install_sglang_files(tmp_path_factory.mktemp("site"))


# The server's health window, shortened (SGLang's 20 s): each health request is given 1 + 5 s.
WINDOW = {"SGLANG_HEALTH_CHECK_TIMEOUT": "1"}


@pytest.fixture
def server(tmp_path):
    log_dir, run_dir = str(tmp_path / "logs"), str(tmp_path / "run")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    port = free_port()

    def args(*extra, **kw):
        a = {"name": "w", "state": "started", "log_dir": log_dir, "run_dir": run_dir, "port": port, "timeout": 120,
             "health_url": "http://127.0.0.1:%d/health_generate" % port, "environment": WINDOW,
             "argv": [TARGET_PYTHON, EMULATOR, "--port", str(port), "--emulator-load-seconds", "0.2",
                      "--emulator-capture-seconds", "0.1"] + list(extra)}
        a.update(kw)
        return a

    def watch(**kw):
        a = {"name": "w", "state": "watched", "log_dir": log_dir, "run_dir": run_dir,
             "health_url": "http://127.0.0.1:%d/health_generate" % port, "environment": WINDOW}
        a.update(kw)
        return run_module("wait_for_model", a)
    args.port, args.log_dir, args.run_dir, args.watch = port, log_dir, run_dir, watch
    yield args
    run_module("wait_for_model", {"name": "w", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir})


def _post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, json.loads(resp.read())


def _wait_until(what, seconds):
    end = time.monotonic() + seconds
    while not what() and time.monotonic() < end:
        time.sleep(0.05)
    return what()


def test_the_smoke_watch_catches_a_decode_crash_with_its_class_and_traceback(server, sglang_root):
    # The eagle scenario without the early-init patch: the server comes up, its first client decode dies with the
    # AttributeError (the scheduler logs it, SIGQUITs its parent, the tree ends). The smoke's sequence: the mark, the
    # request, the watch from the mark.
    first = run_module("wait_for_model", server("--emulator-scenario", "eagle", "--speculative-algorithm", "EAGLE3",
                                                "--emulator-sglang-root", str(sglang_root)))
    assert first.get("failed") is not True, first
    mark = server.watch(watch_time=0, log_offset=-1)
    assert mark.get("failed") is not True, mark
    with open(first["log_path"], "rb") as fh:  # a line start at most at the log's end (access lines may follow)
        logged = fh.read()
    assert 0 < mark["log_offset"] <= len(logged) and logged[mark["log_offset"] - 1:mark["log_offset"]] == b"\n"
    with pytest.raises(Exception):
        _post(server.port, "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 4}})
    watched = server.watch(watch_time=3, log_offset=mark["log_offset"])
    assert watched.get("failed") is True, watched
    assert watched["crash_class"] == "first_request_crash", watched
    assert watched["crash_exception"] == ("AttributeError: 'EAGLEWorkerV2' object has no attribute "
                                          "'spec_disable_batch_threshold'")
    assert "early-init patch" in watched["hint"] and "Scheduler hit an exception" in watched["deciding_line"]
    assert watched["traceback"][0].endswith("Traceback (most recent call last):") and watched["log_tail"]
    assert watched["stopped_after_failure"] == {"how": "the supervisor ends the failed tree"}
    assert _wait_until(lambda: gone(first["pid"]), 20)


def test_a_watch_with_its_supervisor_killed_fails_clearly_and_a_start_puts_one_back(server):
    first = run_module("wait_for_model", server())
    assert first.get("failed") is not True, first
    os.kill(first["supervisor_pid"], signal.SIGKILL)
    assert _wait_until(lambda: not sglang_proc.pid_alive(first["supervisor_pid"]), 10)
    watched = server.watch(watch_time=1)
    assert watched.get("failed") is True and watched["supervisor"] == "gone", watched
    assert "nothing watches the server" in watched["msg"] and "state: started" in watched["msg"]
    assert "crash_class" not in watched and not gone(first["pid"])  # the module stopped nothing
    again = run_module("wait_for_model", server())
    assert again.get("failed") is not True and again["supervisor"] == "restored" and again["pid"] == first["pid"]
    watched = server.watch(watch_time=1)
    assert watched.get("failed") is not True and watched["pid"] == first["pid"], watched


def test_a_server_whose_supervisor_is_gone_and_that_does_not_answer_is_restarted(server):
    first = run_module("wait_for_model", server())
    assert first.get("failed") is not True, first
    os.kill(first["supervisor_pid"], signal.SIGKILL)
    assert _wait_until(lambda: not sglang_proc.pid_alive(first["supervisor_pid"]), 10)
    _post(server.port, "/emulator/health_delay", {"seconds": 8, "count": 2})  # busy: the first probe times out
    plan = run_module("wait_for_model", server(health_timeout=1), check=True)
    assert plan.get("failed") is not True and plan["changed"] is True, plan
    assert plan["msg"] == "would restart the server (its supervisor program is gone and the server does not answer " \
                          "health)" and not gone(first["pid"])
    _post(server.port, "/emulator/health_delay", {"seconds": 8, "count": 2})
    again = run_module("wait_for_model", server(health_timeout=1))
    assert again.get("failed") is not True and again["changed"] is True, again
    assert again["restart_reason"] == "its supervisor program is gone and the server does not answer health"
    assert again["pid"] != first["pid"] and again["attempt"] == first["attempt"] + 1
    assert gone(first["pid"]) and sglang_proc.pid_alive(again["supervisor_pid"])
