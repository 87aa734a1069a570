"""A user's prompt echoed into the server log (SGLang's --log-requests) is data, never evidence.

A healthy server (the SGLang emulator with --log-requests) receives prompts that carry crash text, both as
current SGLang logs them (repr()'d, one line) and as older releases did (raw: the prompt's newlines make new
log lines). Then the whole log is judged: the supervisor's, which wait_for_model's watch from offset 0 reports, an
unchanged `started` re-run, and bin/sglang-logcheck. None may call it a crash, and the server must keep its PID.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from ansible_run import EMULATOR, REPO, TARGET_PYTHON, free_port, install_sglang_files, run_module

CRASH_PROMPT = (
    "Please explain this log:\n"
    "Traceback (most recent call last):\n"
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.72 GiB.\n"
    "[2026-12-03 09:24:19] Scheduler hit an exception: Traceback (most recent call last):\n"
    "Killed\n"
    "Segmentation fault (core dumped)\n"
    "terminate called after throwing an instance of 'c10::Error'\n"
    "Fatal Python error: Aborted\n"
    "SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n"
)


def _generate(port, text):
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % port, method="POST",
                                 data=json.dumps({"text": text, "sampling_params": {"max_new_tokens": 4}}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


@pytest.mark.parametrize("raw", [False, True], ids=["repr-echo", "raw-multiline-echo"])
def test_echoed_crash_text_never_stops_a_healthy_server(tmp_path, raw):
    log_dir, run_dir = str(tmp_path / "logs"), str(tmp_path / "run")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    port = free_port()
    argv = [TARGET_PYTHON, EMULATOR, "--port", str(port), "--log-requests", "--emulator-load-seconds", "0.2",
            "--emulator-capture-seconds", "0.1"] + (["--emulator-raw-request-log"] if raw else [])
    args = {"name": "echo", "state": "started", "argv": argv, "log_dir": log_dir, "run_dir": run_dir,
            "health_url": "http://127.0.0.1:%d/health_generate" % port, "port": port, "timeout": 120}
    try:
        first = run_module("wait_for_model", args)
        assert first.get("failed") is not True, first
        pid = first["pid"]
        for _ in range(3):
            assert _generate(port, CRASH_PROMPT)["text"]
        log_path = os.path.join(log_dir, "echo.log")
        with open(log_path) as f:
            logged = f.read()
        assert "Receive: obj=GenerateReqInput" in logged and "CUDA out of memory" in logged
        if raw:  # the echo really spans several physical lines, one of them starting with "Traceback"
            assert "\nTraceback (most recent call last):\n" in logged

        # The whole log, from its first byte: the supervisor followed it all (and would have ended the server on a
        # crash verdict); the watch reports any crash line it set aside since offset 0.
        watched = run_module("wait_for_model", {"name": "echo", "state": "watched", "log_dir": log_dir,
                                                "run_dir": run_dir, "watch_time": 2, "log_offset": 0,
                                                "health_url": args["health_url"]})
        assert watched.get("failed") is not True, watched
        assert watched.get("crash_class") is None and "log_crash" not in watched, watched
        assert os.path.exists("/proc/%d" % pid)

        # An unchanged re-run keeps the server.
        again = run_module("wait_for_model", args)
        assert again.get("failed") is not True and again["changed"] is False, again
        assert again["pid"] == pid
        assert os.path.exists("/proc/%d" % pid)

        verdict = json.loads(subprocess.run([sys.executable, os.path.join(REPO, "bin", "sglang-logcheck"), log_path],
                                            capture_output=True, text=True, check=False).stdout)
        assert verdict["state"] == "ready", verdict
    finally:
        run_module("wait_for_model", {"name": "echo", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir})


def test_a_prompt_that_forges_the_end_of_its_own_echo_is_reported_and_acts_on_nothing(tmp_path):
    # Raw echo (older SGLang): the prompt closes the echoed object itself, then writes SGLang-looking crash lines.
    # From the log alone that cannot be told from a real crash; the supervisor sets it aside, because every server
    # process lives on and health answers 200 after it, and the watch names it (log_crash, a warning) and fails not.
    forged = ("hi', input_ids=None, sampling_params={})\n"
              "[2026-12-03 09:24:19] Scheduler hit an exception: Traceback (most recent call last):\n"
              '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.72 GiB.\n")
    log_dir, run_dir = str(tmp_path / "logs"), str(tmp_path / "run")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    port = free_port()
    argv = [TARGET_PYTHON, EMULATOR, "--port", str(port), "--log-requests", "--emulator-raw-request-log",
            "--emulator-load-seconds", "0.2", "--emulator-capture-seconds", "0.1"]
    health = "http://127.0.0.1:%d/health_generate" % port
    try:
        first = run_module("wait_for_model", {"name": "forge", "state": "started", "argv": argv, "log_dir": log_dir,
                                              "run_dir": run_dir, "health_url": health, "port": port, "timeout": 120})
        assert first.get("failed") is not True, first
        offset = run_module("wait_for_model", {"name": "forge", "state": "watched", "log_dir": log_dir,
                                               "run_dir": run_dir, "watch_time": 0, "log_offset": -1,
                                               "health_url": health})["log_offset"]
        assert _generate(port, forged)["text"]
        watched = run_module("wait_for_model", {"name": "forge", "state": "watched", "log_dir": log_dir,
                                                "run_dir": run_dir, "watch_time": 3, "log_offset": offset,
                                                "health_url": health})
        assert watched.get("failed") is not True, watched
        assert watched["log_crash"]["class"] == "cuda_oom" and watched["log_crash"]["acted_on"] is False
        assert "nothing was stopped" in watched["msg"] and "stopped_after_failure" not in watched
        assert os.path.exists("/proc/%d" % first["pid"])
        again = run_module("wait_for_model", {"name": "forge", "state": "watched", "log_dir": log_dir,
                                              "run_dir": run_dir, "watch_time": 1, "log_offset": -1,
                                              "health_url": health})
        assert again.get("failed") is not True and again["pid"] == first["pid"], again
    finally:
        run_module("wait_for_model", {"name": "forge", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir})


# A prompt that reaches the operator's terminal if anything quotes it raw: clear the screen, set the window title
# (OSC ... BEL), go back to the line's start and overwrite it, then a fake PLAY RECAP that says all went well.
HOSTILE = ("hi', input_ids=None, sampling_params={})\n"
           "[2026-12-03 09:24:19] Scheduler hit an exception: Traceback (most recent call last):"
           "\x1b[2J\x1b[H\x1b]0;all good\x07\x08\x08\x7f\u009b31m\n"
           '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
           "torch.OutOfMemoryError: CUDA out of memory.\x1b[2J\rPLAY RECAP ***\x1b[0m\n"
           "\rlocalhost : ok=9 changed=0 unreachable=0 failed=0\n")
CONTROLS = [chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xa0)]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def test_a_hostile_prompt_reaches_the_operator_with_its_control_characters_escaped(tmp_path):
    # Raw echo: the prompt ends its own echo and writes SGLang-looking lines full of terminal control sequences. The
    # watch names the forged crash (log_crash and a module warning that quotes the line) and returns the log tail:
    # every string that reaches the operator shows ESC as \x1b, CR as \x0d, BEL as \x07, and no control character.
    log_dir, run_dir = str(tmp_path / "logs"), str(tmp_path / "run")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    port = free_port()
    argv = [TARGET_PYTHON, EMULATOR, "--port", str(port), "--log-requests", "--emulator-raw-request-log",
            "--emulator-load-seconds", "0.2", "--emulator-capture-seconds", "0.1"]
    health = "http://127.0.0.1:%d/health_generate" % port
    try:
        first = run_module("wait_for_model", {"name": "hostile", "state": "started", "argv": argv, "log_dir": log_dir,
                                              "run_dir": run_dir, "health_url": health, "port": port, "timeout": 120})
        assert first.get("failed") is not True, first
        assert _generate(port, HOSTILE)["text"]
        with open(os.path.join(log_dir, "hostile.log"), encoding="utf-8") as fh:
            assert "\x1b[2J" in fh.read()  # the log itself keeps the bytes as they came
        watched = run_module("wait_for_model", {"name": "hostile", "state": "watched", "log_dir": log_dir,
                                                "run_dir": run_dir, "watch_time": 2, "log_offset": 0,
                                                "health_url": health, "log_tail_lines": 20})
        assert watched.get("failed") is not True, watched
        assert watched["log_crash"]["class"] == "cuda_oom", watched
        warnings = " ".join(watched.get("warnings") or [])
        assert "Scheduler hit an exception" in warnings and "\\x1b[2J\\x1b[H\\x1b]0;all good\\x07" in warnings
        assert "\\x1b[2J\\x1b[H" in watched["msg"] and "\\x1b[2J" in watched["log_crash"]["line"]
        assert any("\\x1b[2J\\x0dPLAY RECAP" in line or "PLAY RECAP ***\\x1b[0m" in line for line in watched["log_tail"])
        for text in _strings(watched):
            bad = [c for c in CONTROLS if c in text]
            assert not bad, (bad, text)
    finally:
        run_module("wait_for_model", {"name": "hostile", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir})


@pytest.fixture(scope="module")
def sglang_root(tmp_path_factory):
    """An 'installed' sglang package dir holding the real 0.5.23 eagle_worker_v2.py and scheduler.py (the emulator's
    eagle scenario reads them)."""
    return install_sglang_files(tmp_path_factory.mktemp("site"))


def test_a_prompts_fake_traceback_never_names_a_real_death_and_the_class_is_called_uncertain(tmp_path, sglang_root):
    # Raw echo (older SGLang): the prompt ends its own echo and writes a complete SGLang-looking scheduler traceback
    # of another class (CUDA OOM). The same request really kills the server (the eagle scenario, unpatched: the
    # first client decode dies with the AttributeError). The death is explained by the latest crash before it, the
    # server's own, and the result says that the class is uncertain and why (a raw echo came before it).
    forged = ("hi', input_ids=None, sampling_params={})\n"
              "[2026-12-03 09:24:19 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
              '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
              "    scheduler.event_loop_overlap()\n"
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.72 GiB.\x1b[2J\n")
    log_dir, run_dir = str(tmp_path / "logs"), str(tmp_path / "run")
    os.makedirs(log_dir)
    os.makedirs(run_dir, mode=0o755)
    port = free_port()
    argv = [TARGET_PYTHON, EMULATOR, "--port", str(port), "--log-requests", "--emulator-raw-request-log",
            "--emulator-scenario", "eagle", "--speculative-algorithm", "EAGLE3", "--emulator-sglang-root",
            str(sglang_root), "--emulator-load-seconds", "0.2", "--emulator-capture-seconds", "0.1"]
    health = "http://127.0.0.1:%d/health_generate" % port
    try:
        first = run_module("wait_for_model", {"name": "fake", "state": "started", "argv": argv, "log_dir": log_dir,
                                              "run_dir": run_dir, "health_url": health, "port": port, "timeout": 120})
        assert first.get("failed") is not True, first
        offset = run_module("wait_for_model", {"name": "fake", "state": "watched", "log_dir": log_dir,
                                               "run_dir": run_dir, "watch_time": 0, "log_offset": -1,
                                               "health_url": health})["log_offset"]
        with pytest.raises(Exception):
            _generate(port, forged)  # the request that kills the server gets no answer
        watched = run_module("wait_for_model", {"name": "fake", "state": "watched", "log_dir": log_dir,
                                                "run_dir": run_dir, "watch_time": 5, "log_offset": offset,
                                                "health_url": health})
        assert watched.get("failed") is True, watched
        with open(os.path.join(log_dir, "fake.log"), encoding="utf-8") as fh:
            logged = fh.read()
        assert "CUDA out of memory" in logged  # the forged traceback is in the log, before the real one
        assert logged.index("CUDA out of memory") < logged.index("'EAGLEWorkerV2' object has no attribute")
        assert watched["crash_class"] != "cuda_oom", watched
        assert "'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'" in watched["crash_exception"]
        assert "CUDA out of memory" not in watched["deciding_line"] + " ".join(watched["traceback"])
        assert watched["class_uncertain"] is True
        assert "The class is uncertain: a raw request echo" in watched["hint"] and "uncertain" in watched["msg"]
        assert "1 earlier crash line set aside" in watched["hint"]
        assert "\x1b" not in json.dumps(watched, ensure_ascii=False)
    finally:
        run_module("wait_for_model", {"name": "fake", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir})
