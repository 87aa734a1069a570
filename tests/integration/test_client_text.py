"""Text that anyone can write never stops, restarts or fails a server that is alive and answering.

Any client, with or without the API key, writes into the server's log: uvicorn logs the method, path and raw
query string of every request (404 and 401 included) and SGLang keeps that access log on. These tests send
crash words that way to the SGLang emulator (which logs its access lines as SGLang's uvicorn does) while
wait_for_model, run by Ansible, judges the log: during a start, during an attach whose first health probe is slow,
during the post-smoke watch. The server must keep its PID every time. The last test is the other side: a crash
whose processes hang (the scheduler logs its exception and answers nothing, nothing exits) is proven by health
failing in a row (the supervisor's requests, hurried while the crash line stands), reported by the watch with the
log's class however short its window, and ended by the supervisor.
"""
from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.request

import pytest

from ansible_run import EMULATOR, TARGET_PYTHON, free_port, gone, run_module

API_KEY = "client-text-test-key"
# Request targets a client can send (no spaces: the request line is split on them). uvicorn logs the path
# re-quoted and the query string as sent.
FORGED_TARGETS = (
    "/Traceback(most_recent_call_last)?e=torch.OutOfMemoryError:CUDA_out_of_memory",
    "/v1/completions?x=ncclSystemError&y=DistBackendError:NCCL_error_in:&z=cudaErrorIllegalAddress",
    "/generate?Scheduler_hit_an_exception=Segmentation_fault&Killed=1&[Errno_98]=address_already_in_use",
    "/health_generate?q=CompilationError:&r=ninja:build_stopped&s=terminate_called_after_throwing",
    "/%5BErrno%2098%5D%20Address%20already%20in%20use?what():=CUDA_error:an_illegal_memory_access",
)


def _send(port, method, target, headers=None):
    """One request as any client could send it; returns the status (None when nothing answered)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, target, body=b"{}" if method == "POST" else None, headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _forge(port, rounds=1):
    """Every forged target, as GET and POST, with no key (401 for POST) and with a wrong one."""
    statuses = []
    for _ in range(rounds):
        for target in FORGED_TARGETS:
            statuses.append(_send(port, "GET", target))
            statuses.append(_send(port, "POST", target, {"Authorization": "Bearer wrong", "Content-Type": "application/json"}))
    return statuses


class Forger(threading.Thread):
    """Sends the forged requests in a loop for as long as the test runs, from the moment the port answers."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.answered = 0

    def run(self):
        while not self.stop.is_set():
            got = [s for s in _forge(self.port) if s is not None]
            self.answered += len(got)
            if not got:
                self.stop.wait(0.05)


@pytest.fixture
def server(tmp_path):
    log_dir, run_dir = str(tmp_path / "logs"), str(tmp_path / "run")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    port = free_port()

    # The role's 0600 --config file holds the key (its one copy on disk; the supervisor reads it from there).
    config = str(tmp_path / "server.yaml")
    with open(os.open(config, os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
        fh.write('api-key: "%s"\n' % API_KEY)

    def args(*extra, **kw):
        a = {"name": "client", "state": "started", "log_dir": log_dir, "run_dir": run_dir, "port": port,
             "health_url": "http://127.0.0.1:%d/health_generate" % port, "api_key": API_KEY, "timeout": 120,
             # the server's health window, shortened (SGLang's 20 s): each health request is given 2 + 5 s
             "environment": {"SGLANG_HEALTH_CHECK_TIMEOUT": "2"},
             "argv": [TARGET_PYTHON, EMULATOR, "--port", str(port), "--config", config,
                      "--emulator-load-seconds", "0.3", "--emulator-capture-seconds", "0.1"] + list(extra)}
        a.update(kw)
        return a
    args.port, args.log_dir, args.run_dir = port, log_dir, run_dir
    yield args
    run_module("wait_for_model", {"name": "client", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir})


def _watch(server, **kw):
    a = {"name": "client", "state": "watched", "log_dir": server.log_dir, "run_dir": server.run_dir,
         "health_url": "http://127.0.0.1:%d/health_generate" % server.port, "api_key": API_KEY,
         "environment": {"SGLANG_HEALTH_CHECK_TIMEOUT": "2"}}
    a.update(kw)
    return run_module("wait_for_model", a)


def _logged(server):
    with open(os.path.join(server.log_dir, "client.log")) as fh:
        return fh.read()


def _assert_forged_lines_are_in_the_log(server):
    text = _logged(server)
    assert '"GET /Traceback%28most_recent_call_last%29?e=torch.OutOfMemoryError:CUDA_out_of_memory HTTP/1.1" 401' in text
    assert '"POST /v1/completions?x=ncclSystemError&y=DistBackendError:NCCL_error_in:&z=cudaErrorIllegalAddress HTTP/1.1" 401' in text


def test_client_requests_during_a_start_never_stop_the_server_being_started(server):
    # uvicorn is up for 4 s before the warm-up ends: the forged lines land before the ready line.
    forger = Forger(server.port)
    forger.start()
    try:
        r = run_module("wait_for_model", server("--emulator-warmup-seconds", "4"))
    finally:
        forger.stop.set()
        forger.join(timeout=30)
    assert r.get("failed") is not True, r.get("msg")
    assert forger.answered > 0 and r.get("crash_class") is None and "log_crash" not in r, r
    text = _logged(server)
    assert text.index('"GET /Traceback%28') < text.index("The server is fired up")
    assert os.path.exists("/proc/%d" % r["pid"])


def test_an_attach_with_a_slow_first_probe_reads_only_new_lines_and_keeps_the_server(server):
    first = run_module("wait_for_model", server())
    assert first.get("failed") is not True, first.get("msg")
    assert all(s is not None for s in _forge(server.port, rounds=2))
    _assert_forged_lines_are_in_the_log(server)
    # A busy server: the re-run's first probe (given the server's 2 s window + 5 s) gets no answer in time, so it
    # attaches.
    req = urllib.request.Request("http://127.0.0.1:%d/emulator/health_delay" % server.port, method="POST",
                                 data=json.dumps({"seconds": 8, "count": 1}).encode(),
                                 headers={"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()
    size_before = os.path.getsize(os.path.join(server.log_dir, "client.log"))
    again = run_module("wait_for_model", server(health_timeout=1.0))
    assert again.get("failed") is not True, again.get("msg")
    assert again["changed"] is False and again["pid"] == first["pid"]
    # the attach waits on the server's supervisor, which follows the log all along: the forged crash lines logged
    # before were read (and acted on nothing) then, never judged again
    assert again["msg"].startswith("attached to our server (same fingerprint, its supervisor program)"), again["msg"]
    assert os.path.getsize(os.path.join(server.log_dir, "client.log")) >= size_before
    assert "log_crash" not in again
    assert os.path.exists("/proc/%d" % first["pid"])


def test_client_requests_during_the_smoke_watch_never_fail_it(server):
    first = run_module("wait_for_model", server())
    assert first.get("failed") is not True, first.get("msg")
    mark = _watch(server, watch_time=0, log_offset=-1)["log_offset"]
    forger = Forger(server.port)
    forger.start()
    try:
        watched = _watch(server, watch_time=3, log_offset=mark, stop_on_failure=True)
    finally:
        forger.stop.set()
        forger.join(timeout=30)
    assert watched.get("failed") is not True, watched.get("msg")
    assert "log_crash" not in watched and "stopped_after_failure" not in watched
    _assert_forged_lines_are_in_the_log(server)
    assert os.path.exists("/proc/%d" % first["pid"])


def test_a_crash_whose_processes_hang_is_proven_by_health_and_stopped_even_in_a_short_watch(server):
    # A crash line stands, our health requests sent after it wait out the server's window (2 s), and nothing moves
    # for an interval (2 + 5 s): stuck at once, named by the line; serve_stuck_action restart ends the server.
    first = run_module("wait_for_model", server("--emulator-scenario", "crash_hang", health_timeout=2,
                                                serve_stuck_action="restart"))
    assert first.get("failed") is not True, first.get("msg")
    mark = _watch(server, watch_time=0, log_offset=-1)["log_offset"]
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 4}}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % server.port, method="POST", data=body,
                                 headers={"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"})
    threading.Thread(target=lambda: _quiet(req), daemon=True).start()  # never answered: the scheduler hangs
    deadline = time.monotonic() + 20
    while "Scheduler hit an exception" not in _logged(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    watched = _watch(server, watch_time=1, log_offset=mark, health_timeout=2)
    assert watched.get("failed") is True, watched
    assert watched["crash_class"] == "cuda_error" and "illegal memory access" in watched["crash_exception"]
    # the watch's own request sent after the line waited out the window (or the supervisor decided first)
    assert ("asked by this watch" in watched["evidence"] or "decided by its supervisor program" in watched["msg"])
    assert time.monotonic() - t0 < 30  # a window or an interval (7 s) after the line, not serve_stuck_seconds
    deadline = time.monotonic() + 20
    while not gone(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(first["pid"])


def _quiet(req):
    try:
        urllib.request.urlopen(req, timeout=60).read()
    except OSError:
        pass
