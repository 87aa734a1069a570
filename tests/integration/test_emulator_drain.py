"""Integration tests: the emulator's /v1/loads and its SIGTERM drain, as a real process tree on a loopback port
(the unit tests in tests/unit/test_emulator_loads_drain.py cover the pure parts)."""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time

import pytest

from emulator_proc import FAST, READY, Emulator, session_left

KEY = "drain-test-key-0123456789"
AUTH = {"Authorization": "Bearer " + KEY}
# A decode step of 1 s: a 4-token request is held for 4 s, long enough for the steps of a test on a busy machine.
SLOW = ["--api-key", KEY, "--emulator-step-ms", "1000", "--emulator-drain-interval", "0.2"]


@pytest.fixture
def start(tmp_path):
    started = []

    def _start(*args):
        emulator = Emulator(tmp_path, *args)
        started.append(emulator)
        return emulator

    yield _start
    for emulator in started:
        emulator.stop()


def running(emu):
    status, body = emu.request("/v1/loads?include=core", headers=AUTH)
    assert status == 200, body
    (load,) = body["loads"]
    return load["num_running_reqs"], load["num_waiting_reqs"]


def until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("not within %s s" % timeout)


def generate_in_background(emu, results):
    def run():
        try:
            results.append(emu.request("/generate", {"text": "held", "sampling_params": {"max_new_tokens": 4}},
                                       headers=AUTH, timeout=10))
        except (OSError, http.client.HTTPException) as exc:  # the server went away with the request
            results.append(("no answer", str(exc)))
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_loads_count_the_requests_running_and_need_the_api_key(start):
    emu = start(*(SLOW + FAST))
    emu.wait_for(READY)
    assert emu.request("/v1/loads")[0] == 401
    status, body = emu.request("/v1/loads", headers=AUTH)
    assert status == 200 and body["loads"][0]["num_running_reqs"] == 0 and "memory" in body["loads"][0]
    results = []
    threads = [generate_in_background(emu, results) for _ in range(2)]
    until(lambda: running(emu) == (2, 0))
    assert emu.request("/health_generate")[0] == 200  # a long decode holds no health check
    for thread in threads:
        thread.join(30)
    assert [status for status, _ in results] == [200, 200]
    assert running(emu) == (0, 0)
    assert emu.request("/v1/loads?include=bogus", headers=AUTH)[0] == 400


def test_sigterm_answers_health_503_finishes_the_requests_held_then_exits_0(start):
    emu = start(*(SLOW + FAST))
    emu.wait_for(READY)
    results = []
    thread = generate_in_background(emu, results)
    until(lambda: running(emu) == (1, 0))
    emu.proc.send_signal(signal.SIGTERM)  # the main process only, as `kill <pid>` does
    emu.wait_for("SIGTERM received. signum=<Signals.SIGTERM: 15> frame=None. Draining requests and shutting down...")
    until(lambda: emu.request("/health")[0] == 503)
    assert emu.request("/health_generate")[0] == 503
    assert running(emu) == (1, 0)  # still held, still counted
    # A new request is still taken, as SGLang 0.5.23 takes it.
    assert emu.request("/generate", {"text": "late", "sampling_params": {"max_new_tokens": 2}}, headers=AUTH,
                       timeout=10)[0] == 200
    thread.join(30)
    assert results[0][0] == 200 and results[0][1]["meta_info"]["completion_tokens"] == 4
    assert emu.wait_exit(20) == 0
    text = emu.text()
    assert "Health check request received during shutdown. Returning 503." in text
    assert "Gracefully exiting... Remaining number of requests 1. Remaining requests remaining_rids=['" in text
    assert text.rstrip().endswith("Gracefully exiting... Remaining number of requests 0. Remaining requests "
                                  "remaining_rids=[].")
    assert session_left(emu.pid) == []


def test_sigterm_to_the_whole_group_kills_the_children_and_ends_the_drain(start):
    emu = start(*(SLOW + FAST))
    emu.wait_for(READY)
    results = []
    thread = generate_in_background(emu, results)
    until(lambda: running(emu) == (1, 0))
    os.killpg(emu.pid, signal.SIGTERM)  # what a stop of the whole tree sends (wait_for_model, systemd)
    assert emu.wait_exit(20) == 0
    thread.join(30)
    assert results[0][0] == "no answer", results  # the held request never got its answer
    assert "drain: the child processes are gone" in emu.text()
    assert session_left(emu.pid) == []
