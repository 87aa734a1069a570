"""A run never says healthy without an answer of its own: a server whose main process is stopped (SIGSTOP) after its
supervisor said ready is not `unchanged, healthy` - the attach asks health itself, one request at a time, each given
the server's whole health window, and fails saying the server does not answer; nothing is stopped (a busy server is
not a dead one). The real wait_for_model, run by Ansible, and its real supervisor program, on the SGLang emulator."""
from __future__ import annotations

import os
import signal
import time

import pytest

from ansible_run import EMULATOR, TARGET_PYTHON, free_port, gone, run_module

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path):
    log_dir, run_dir = str(tmp_path / "logs"), str(tmp_path / "run")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    port = free_port()
    args = {"name": "stopped", "state": "started", "log_dir": log_dir, "run_dir": run_dir, "port": port,
            "health_url": "http://127.0.0.1:%d/health_generate" % port, "timeout": 120, "unhealthy_after": 2,
            # the server's health window, shortened (SGLang's 20 s): each health request is given 2 + 5 s
            "environment": {"SGLANG_HEALTH_CHECK_TIMEOUT": "2"},
            "argv": [TARGET_PYTHON, EMULATOR, "--port", str(port), "--emulator-load-seconds", "0.3",
                     "--emulator-capture-seconds", "0.1"]}
    yield args
    run_module("wait_for_model", {"name": "stopped", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir})


def test_a_stopped_server_is_never_unchanged_healthy_and_is_not_stopped(server):
    first = run_module("wait_for_model", server)
    assert first.get("failed") is not True and first["changed"] is True, first.get("msg")
    pid = first["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        again = run_module("wait_for_model", server)
        took = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    print("attach to the stopped server: %.1f s: %s" % (took, again.get("msg")))
    assert again.get("failed") is True, again
    assert "does not answer health" in again["msg"] and "Not proven healthy; nothing was stopped" in again["msg"]
    assert "became healthy" not in again["msg"]
    assert again["changed"] is False and again["pid"] == pid and not again.get("stopped")
    assert not gone(pid)  # still there, the same process
    # Answering again (SIGCONT): the same server is kept, on an answer of this run's own.
    kept = run_module("wait_for_model", server)
    assert kept.get("failed") is not True and kept["pid"] == pid and kept["attempt"] == first["attempt"], kept
    assert kept.get("restart_reason") is None and not kept.get("stopped")  # (changed only when the supervisor
    # program on disk was brought up to date: no restart)
