"""A stop is not a crash; a child's exit code and the KV pool check are named by cause.

The lines are SGLang's own (python/sglang/srt/utils/watchdog.py SubprocessWatchdog, the tokenizer manager's
SignalHandler, the KV cache configurator / MemoryPoolConfig / model_runner memory checks of the 0.4-0.5
releases), checked whole, line by line and in small random pieces (verdicts() in test_sglang_log_causes).
"""
from __future__ import annotations

import pytest

from ansible.module_utils.sglang_log import classify_bytes

from test_sglang_log_causes import ACCESS, P, P0, READY, verdicts

SERVING = P0 + "Load weight begin. avail mem=139.13 GB\n" + READY + ACCESS
SIGTERM = P0 + "SIGTERM received. signum=None frame=None. Draining requests and shutting down...\n"
SIGQUIT = P0 + "SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n"
OLD_SIGQUIT = P0 + "Received sigquit from a child process. It usually means the child failed.\n"
TEARDOWN = P0 + "kill_process_tree called: parent_pid=4714, include_parent=True, pid=4714\n"


def exited(code, name="scheduler_0"):
    return P0 + "Subprocess %s (pid=4761) crashed with exit code %d. Triggering SIGQUIT for cleanup...\n" % (name, code)


@pytest.mark.parametrize("log", [
    # 0.5.17 on the H200: our stop (SIGTERM to the tree), the scheduler ended by it, the launcher's teardown
    SERVING + SIGTERM + exited(-15) + SIGQUIT + TEARDOWN,
    # the watchdog saw the child gone before the parent's handler logged; SIGINT (Ctrl-C) the same
    SERVING + exited(-15) + SIGQUIT + SIGTERM + TEARDOWN,
    SERVING + exited(-2, "detokenizer") + OLD_SIGQUIT + TEARDOWN,
    # after a stop, siblings SIGKILLed by kill_process_tree or a stop's escalation, a wrapper shell's job line
    SERVING + SIGTERM + exited(-15) + exited(-9, "detokenizer") + SIGQUIT + "Killed\n",
    # the verbose watchdog wording
    SERVING + P0 + "Subprocess scheduler_0 (pid=7) is gone: killed by SIGTERM (exit code -15).\n"
    + P0 + "Triggering SIGQUIT for cleanup...\n" + SIGQUIT,
    # uvicorn's own shutdown, then a child reported exited
    SERVING + P0 + "INFO:     Shutting down\n" + P0 + "Detokenizer process exited\n",
    # SIGINT raises KeyboardInterrupt in every process: tracebacks that end in it are a stop
    SERVING + "Process Process-1:\nTraceback (most recent call last):\n"
    '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n'
    "    self.run()\n"
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2700, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\nKeyboardInterrupt\n" + exited(-2) + SIGQUIT,
])
def test_a_stop_is_not_a_crash(log):
    s = verdicts(log)
    assert (s["state"], s["crash_class"]) == ("ready", None)
    assert "ready to roll" in s["line"]
    assert s["stop"] is not None


def test_the_stop_is_reported_with_its_first_line():
    s = classify_bytes((SERVING + SIGTERM + exited(-15) + SIGQUIT).encode()).summary()
    lines = (SERVING + SIGTERM).splitlines()
    assert s["stop"] == {"line": lines[-1], "lineno": len(lines)}
    assert classify_bytes(SERVING.encode()).summary()["stop"] is None


@pytest.mark.parametrize("log, cls, line", [
    # kill -9 of the scheduler (the H200 kill run): SGLang's SIGQUIT line decides, as before
    (SERVING + exited(-9) + SIGQUIT + TEARDOWN, "child_sigquit", "SIGQUIT received"),
    (SERVING + exited(1) + OLD_SIGQUIT, "child_sigquit", "Received sigquit"),
    # the log ends at the watchdog's line: the exit code alone decides
    (SERVING + exited(-9), "killed", "crashed with exit code -9"),
    (SERVING + P0 + "Subprocess scheduler_0 (pid=7) is gone: exit code 1.\n", "killed", "is gone: exit code 1"),
    # a native signal is a native crash at once
    (SERVING + exited(-11) + SIGQUIT, "native_crash", "crashed with exit code -11"),
    (SERVING + exited(-6) + SIGQUIT, "native_crash", "crashed with exit code -6"),
    (SERVING + P0 + "Subprocess scheduler_1 (pid=7) is gone: killed by SIGSEGV (exit code -11).\n" + SIGQUIT,
     "native_crash", "killed by SIGSEGV"),
    # a real fault while a stop drains is still a crash
    (SERVING + SIGTERM + P + "RuntimeError: CUDA error: an illegal memory access was encountered\n",
     "cuda_error", "illegal memory access"),
    (SERVING + SIGTERM + exited(-11) + SIGQUIT, "native_crash", "crashed with exit code -11"),
    # a crash before our stop stays a crash
    (SERVING + exited(-9) + SIGQUIT + SIGTERM + exited(-15), "child_sigquit", "SIGQUIT received"),
])
def test_a_childs_exit_code_names_the_cause(log, cls, line):
    s = verdicts(log)
    assert (s["state"], s["crash_class"]) == ("crashed", cls)
    assert line in s["line"]


KV_POOL = [
    # 0.5.17 (kv_cache_configurator._profile_available_bytes), the H200 lowmem run
    "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.0005. Raise "
    "--mem-fraction-static above 0.001 (minimum viable = 1 - available/pre = 0.0006). If using speculative "
    "decoding, draft weights are now counted.",
    # model_runner / MemoryPoolConfig.__post_init__ (max_total_num_tokens <= 0), with and without the value
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
    "mem_fraction_static=0.1",
    # the oldest releases' typo
    "RuntimeError: Not enought memory. Please try to increase --mem-fraction-static.",
    # hybrid (mamba / linear attention) models
    "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
    "max_mamba_cache_size=0 (total_rest_memory=-1.20 GB, mamba_cache_per_req=2.00 MB). Try: (1) reduce "
    "--max-running-requests, (2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
    "(4) use GPUs with more memory.",
]


@pytest.mark.parametrize("exc", KV_POOL)
def test_every_wording_of_the_kv_pool_check_is_kv_pool_oom(exc):
    tb = (P + "Scheduler hit an exception: Traceback (most recent call last):\n"
          '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 4931, in run_scheduler_process\n'
          "    scheduler = Scheduler(\n"
          '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 775, in alloc_memory_pool\n'
          "    raise ValueError(\n" + exc + "\n\n" + OLD_SIGQUIT)
    s = verdicts(P0 + "Load weight begin. avail mem=139.13 GB\n" + P0 + "Load weight end. avail mem=139 GB\n" + tb)
    assert (s["state"], s["crash_class"]) == ("crashed", "kv_pool_oom")
    assert "Scheduler hit an exception" in s["line"]
    assert s["exception"] == exc
    # on its own (a logger line, no traceback) too
    s = verdicts(P + exc.split(": ", 1)[1] + "\n")
    assert (s["state"], s["crash_class"]) == ("crashed", "kv_pool_oom")


@pytest.mark.parametrize("exc", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.72 GiB.",
    "RuntimeError: Not enough memory to load the tokenizer",  # not the KV pool
])
def test_other_memory_failures_are_not_the_kv_pool(exc):
    tb = (P + "Scheduler hit an exception: Traceback (most recent call last):\n"
          '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 4931, in run_scheduler_process\n'
          "    scheduler = Scheduler(\n" + exc + "\n")
    assert verdicts(tb)["crash_class"] != "kv_pool_oom"
