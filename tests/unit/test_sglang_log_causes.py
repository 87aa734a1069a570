"""Request echo is data, deaths are named by their cause, and a log rotated by copytruncate is followed.

Every case is crafted from the real message formats (SGLang's request_logger / tokenizer_manager,
http_server, watchdog; torch's ProcessGroupNCCL and c10 aborts; CPython's faulthandler; bash's job
lines; the CRI log format) and checked three ways: whole, fed line by line, and fed in small random
pieces, which must all give the same verdict (the bulk pre-filter may skip nothing that matters).
"""
from __future__ import annotations


import pytest

from ansible.module_utils.sglang_log import CRASH_CLASSES, HINTS, LogClassifier, LogFollower, classify_bytes

from log_pieces import fed_in_pieces

P = "[2026-03-18 11:22:06 TP0] "
P0 = "[2026-03-18 11:22:06] "
READY = P0 + "The server is fired up and ready to roll!\n"
ACCESS = P0 + 'INFO:     127.0.0.1:50812 - "POST /generate HTTP/1.1" 200 OK\n'


def verdicts(text):
    """The summary whole, line by line, and in random small pieces; all three must agree."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    whole = classify_bytes(data).summary()
    by_line = LogClassifier()
    for line in data.splitlines(True):
        by_line.feed(line)
    by_line.finalize()
    pieces = fed_in_pieces(data, len(data), 23)
    pieces.finalize()
    for other in (by_line.summary(), pieces.summary()):
        for key in ("state", "crash_class", "line", "lineno", "phase"):
            assert other[key] == whole[key], (key, other[key], whole[key])
    return whole


# ------------------------------------------------------------------ request echo is data
ECHO_TEXT = ("my server log says Traceback (most recent call last):\\n  File \\\"/x/scheduler.py\\\", line 1, "
             "in run_scheduler_process\\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\\n"
             "Killed\\nScheduler hit an exception: NCCL error\\nThe server is fired up and ready to roll!")


@pytest.mark.parametrize("echo", [
    # SGLang >= 0.4 (request_logger / tokenizer_manager): repr() of every field, one physical line.
    P0 + "Receive: obj=GenerateReqInput(validation_time=None, received_time=1.5, rid='a1', "
         "text='" + ECHO_TEXT + "', input_ids=None, sampling_params={'max_new_tokens': 8})\n",
    P0 + "Finish: obj=GenerateReqInput(rid='a1', text='" + ECHO_TEXT + "'), out={'text': 'CUDA error: an "
         "illegal memory access was encountered', 'meta_info': {'id': 'a1', 'finish_reason': None}}\n",
    P0 + "Receive OpenAI: obj={'model': 'm', 'prompt': '" + ECHO_TEXT + "'}\n",
    P0 + '{"timestamp": "2026-03-18T11:22:06", "event": "request.received", "rid": "a1", '
         '"obj": {"text": "Traceback (most recent call last):\\nRuntimeError: CUDA error: misaligned address"}}\n',
])
def test_request_echo_is_never_evidence(echo):
    s = verdicts(READY + echo + ACCESS)
    assert s["state"] == "ready" and s["crash_class"] is None


def test_a_raw_prompt_over_several_physical_lines_is_data():
    # Older SGLang printed string fields without repr(): a prompt's own newlines start new physical lines.
    echo = (P0 + 'Receive: obj=GenerateReqInput(text="Why does my job print this?\n'
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "Fatal Python error: Segmentation fault\n"
            "Killed\n"
            'terminate called after throwing an instance of \'c10::Error\'\n'
            '", input_ids=None, rid="b2", return_logprob=False)\n')
    s = verdicts(READY + echo + ACCESS + P + "Decode batch. #running-req: 1, #token: 40, \n")
    assert s["state"] == "ready" and s["crash_class"] is None


def test_an_echo_longer_than_the_line_cap_stays_data():
    big = "x" * (70 * 1024)
    echo = P0 + "Receive: obj=GenerateReqInput(text='" + big + " CUDA out of memory " + big + "')\n"
    s = verdicts(READY + echo + "Killed?\n" + ACCESS)
    assert s["state"] == "ready"


def test_a_real_crash_right_after_an_echoed_request_is_caught():
    echo = P0 + "Receive: obj=GenerateReqInput(rid='c3', text='Traceback (most recent call last):')\n"
    crash = (P + "Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/x/sglang/srt/managers/scheduler.py", line 3190, in run_scheduler_process\n'
             "    scheduler.event_loop_overlap()\n"
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    s = verdicts(READY + echo + crash)
    assert s["crash_class"] == "cuda_oom" and s["line"].endswith("Scheduler hit an exception: Traceback (most recent call last):")
    # and an unprefixed death right after a complete echo line
    s = verdicts(READY + echo + "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f2ea0870640 "
                 "(most recent call first):\n  File \"/x/scheduler.py\", line 1 in event_loop_normal\n")
    assert s["crash_class"] == "native_crash" and s["line"] == "Fatal Python error: Segmentation fault"


def test_a_raw_multiline_echo_is_data_until_its_closing_line_even_across_sglang_looking_lines():
    # Older SGLang logged the text raw: a pasted log inside a prompt brings its own "[date] ..." lines.
    echo = (P0 + 'Receive: obj=GenerateReqInput(rid="r1", text="don\'t mind this " quote\n'
            + P + "Scheduler hit an exception: Traceback (most recent call last):\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
            + P + "Received sigquit from a child process. It usually means the child failed.\n"
            'Killed\n", input_ids=None, sampling_params={\'max_new_tokens\': 4})\n')
    s = verdicts(READY + echo + ACCESS)
    assert s["state"] == "ready" and s["crash_class"] is None
    # After the echo's closing line the server's own lines decide again.
    crash = P + "Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: boom\n"
    s = verdicts(READY + echo + crash)
    assert s["state"] == "crashed" and s["line"].startswith(P + "Scheduler hit an exception")


def test_an_echo_that_never_closes_stops_being_data_after_the_longest_echo():
    from ansible.module_utils.sglang_log import _ECHO_MAX
    echo = P0 + 'Receive: obj=GenerateReqInput(rid="r1", text="cut short\n' + ("y" * 1000 + "\n") * (_ECHO_MAX // 1000 + 2)
    crash = P + "Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: boom\n"
    s = verdicts(READY + echo + crash)
    assert s["state"] == "crashed" and s["line"].startswith(P + "Scheduler hit an exception")


# ------------------------------------------------------------------ deaths named by cause
FAULTHANDLER = ("Fatal Python error: Segmentation fault\n\n"
                "Thread 0x00007f2e93fff640 (most recent call first):\n"
                '  File "/x/sglang/srt/managers/scheduler.py", line 462 in watchdog_thread\n'
                '  File "/usr/lib/python3.10/threading.py", line 953 in run\n\n'
                "Current thread 0x00007f2ea0870640 (most recent call first):\n"
                '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py", line 2501 in all_reduce\n'
                '  File "/x/sglang/srt/managers/scheduler.py", line 1748 in run_scheduler_process\n\n'
                "Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)\n")

NCCL_TIMEOUT = ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
                "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n")


@pytest.mark.parametrize("log, cls, line", [
    # C++ aborts: the what() text decides the cause; a bare abort is a native crash.
    ("terminate called after throwing an instance of 'c10::DistBackendError'\n"
     "  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, NumelIn=19008, NumelOut=152064, "
     "Timeout(ms)=600000) ran for 600020 milliseconds before timing out.\n"
     "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 (most recent call first):\n"
     "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3b6d41df86 in libc10.so)\n"
     "Fatal Python error: Aborted\n",
     "nccl", "terminate called after throwing an instance of 'c10::DistBackendError'"),
    ("terminate called after throwing an instance of 'c10::Error'\n"
     "  what():  CUDA error: an illegal memory access was encountered\n"
     "CUDA kernel errors might be asynchronously reported at some other API call\n",
     "cuda_error", "terminate called after throwing an instance of 'c10::Error'"),
    ("terminate called after throwing an instance of 'std::runtime_error'\n  what():  bad thing\nAborted (core dumped)\n",
     "native_crash", "terminate called after throwing an instance of 'std::runtime_error'"),
    # CPython faulthandler, no Python traceback at all
    (FAULTHANDLER, "native_crash", "Fatal Python error: Segmentation fault"),
    ("Fatal Python error: Aborted\n\nCurrent thread 0x00007f2ea0870640 (most recent call first):\n  <no Python frame>\n",
     "native_crash", "Fatal Python error: Aborted"),
    ("Fatal Python error: Bus error\n\n", "native_crash", "Fatal Python error: Bus error"),
    # a shell's job lines
    ("Aborted (core dumped)\n", "native_crash", "Aborted (core dumped)"),
    ("Segmentation fault (core dumped)\n", "native_crash", "Segmentation fault (core dumped)"),
    ("start.sh: line 12: 120984 Segmentation fault      (core dumped) python3 -m sglang.launch_server --tp 8\n",
     "native_crash", "start.sh: line 12: 120984 Segmentation fault      (core dumped) python3 -m sglang.launch_server --tp 8"),
    ("120984 Killed                  python3 -m sglang.launch_server --model-path /m\n", "killed",
     "120984 Killed                  python3 -m sglang.launch_server --model-path /m"),
    ("[1]+  Killed                  python3 -m sglang.launch_server --model-path /m\n", "killed",
     "[1]+  Killed                  python3 -m sglang.launch_server --model-path /m"),
    (P0 + "Load weight begin. avail mem=78.38 GB\r\nKilled\r\n", "killed", "Killed"),
    ("2026-03-18T11:22:06.731234567+08:00 stderr F Killed\n", "killed",
     "2026-03-18T11:22:06.731234567+08:00 stderr F Killed"),
    # single-line signatures standing alone
    ("RuntimeError: CUDA driver error: unspecified launch failure\n", "cuda_error",
     "RuntimeError: CUDA driver error: unspecified launch failure"),
    ("CUDA driver error: unspecified launch failure\n", "cuda_error", "CUDA driver error: unspecified launch failure"),
    ("Failed: Cuda error /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:368 'cudaErrorIllegalAddress'\n", "cuda_error",
     "Failed: Cuda error /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:368 'cudaErrorIllegalAddress'"),
    (NCCL_TIMEOUT, "nccl", NCCL_TIMEOUT.rstrip("\n")),
    ("[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
     "progress in monitoring enqueued collectives.\n", "nccl",
     "[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
     "progress in monitoring enqueued collectives."),
    ("[rank3]:[E416 13:29:57.332110411 ProcessGroupNCCL.cpp:2057] [PG ID 2 PG GUID 3 Rank 3] Process group watchdog thread "
     "terminated with exception: CUDA error: an illegal memory access was encountered\n", "cuda_error",
     "[rank3]:[E416 13:29:57.332110411 ProcessGroupNCCL.cpp:2057] [PG ID 2 PG GUID 3 Rank 3] Process group watchdog thread "
     "terminated with exception: CUDA error: an illegal memory access was encountered"),
    (P + "Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing\n", "cuda_error",
     P + "Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing"),
    (P + "Capture cuda graph failed: shape mismatch\n", "cuda_graph_capture",
     P + "Capture cuda graph failed: shape mismatch"),
    (P0 + "Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause "
          "is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.\n", "killed",
     P0 + "Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause "
          "is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."),
    (P0 + "Rank 0 scheduler died during initialization (exit code: -11). If exit code is -9 (SIGKILL), a common cause "
          "is the OS OOM killer.\n", "native_crash",
     P0 + "Rank 0 scheduler died during initialization (exit code: -11). If exit code is -9 (SIGKILL), a common cause "
          "is the OS OOM killer."),
    ("[12-16 14:27:08] Rank 0 scheduler is dead. Please check if there are relevant logs.\n[12-16 14:27:10] Exit code: -9\n",
     "killed", "[12-16 14:27:08] Rank 0 scheduler is dead. Please check if there are relevant logs."),
    ("[2026-03-18 11:22:06] ninja: build stopped: subcommand failed.\n", "compile_error",
     "[2026-03-18 11:22:06] ninja: build stopped: subcommand failed."),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 616.00 MiB. GPU 0 has a total capacity of 79.10 GiB\n",
     "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 616.00 MiB. GPU 0 has a total capacity of 79.10 GiB"),
    # SGLang's own watchdog (hard); the soft one only warns
    ("[2025-06-26 07:25:31 DP4 TP4] Pyspy failed to dump PID 113688. Error: /bin/bash: line 1: py-spy: command not found\n\n"
     "[2025-06-26 07:25:31 DP4 TP4] Watchdog timeout (self.watchdog_timeout=300)\n", "watchdog_timeout",
     "[2025-06-26 07:25:31 DP4 TP4] Watchdog timeout (self.watchdog_timeout=300)"),
    (P + "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)\n", "watchdog_timeout",
     P + "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"),
    # the newer level/pid/file format and CRI prefixes
    ("2026-03-18 11:22:06.731 ERROR 120984 [ TP0 scheduler.py:3190] Scheduler hit an exception: Traceback (most recent call last):\n"
     '2026-03-18 11:22:06.731 ERROR 120984 [ TP0 scheduler.py:3190]   File "/x/scheduler.py", line 3190, in run_scheduler_process\n'
     "2026-03-18 11:22:06.731 ERROR 120984 [ TP0 scheduler.py:3190] torch.distributed.DistBackendError: NCCL error in: "
     "../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error\n", "nccl",
     "2026-03-18 11:22:06.731 ERROR 120984 [ TP0 scheduler.py:3190] Scheduler hit an exception: Traceback (most recent call last):"),
    ("2026-03-18T11:22:06.731234567+08:00 stderr F [2026-03-18 11:22:06 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
     '2026-03-18T11:22:06.731234567+08:00 stderr F   File "/x/sglang/srt/managers/scheduler.py", line 1, in run_scheduler_process\n'
     "2026-03-18T11:22:06.731234567+08:00 stderr P RuntimeError: CUDA error: an illegal mem\n"
     "2026-03-18T11:22:06.731234567+08:00 stderr F ory access was encountered\n", "cuda_error",
     "2026-03-18T11:22:06.731234567+08:00 stderr F [2026-03-18 11:22:06 TP0] Scheduler hit an exception: Traceback (most recent call last):"),
    # innermost evidence first: a triton compile error under CUDA-graph capture is a compile error
    (P + "Scheduler hit an exception: Traceback (most recent call last):\n"
     '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 300, in capture\n'
     '  File "/x/triton/compiler/compiler.py", line 100, in compile\n'
     "triton.compiler.errors.CompilationError: at 10:4: invalid\n", "compile_error",
     P + "Scheduler hit an exception: Traceback (most recent call last):"),
    # a warm-up that fails while the ready line is still printed (PD disaggregation marks the server unhealthy)
    (P0 + "Disaggregation warmup failed (mode=prefill), status codes: [503]\n" + READY, "warmup_failed",
     P0 + "Disaggregation warmup failed (mode=prefill), status codes: [503]"),
    (P0 + "Initialization failed. warmup error: Traceback (most recent call last):\n"
     '  File "/x/sglang/srt/entrypoints/http_server.py", line 2280, in _execute_server_warmup\n'
     "AssertionError: {\"detail\": \"502 Bad Gateway\"}\n" + READY, "warmup_failed",
     P0 + "Initialization failed. warmup error: Traceback (most recent call last):"),
    # SIGQUIT wordings, ms timestamps (SGLANG_LOG_MS)
    ("[2026-03-18 11:22:06.731] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n",
     "child_sigquit", "[2026-03-18 11:22:06.731] SIGQUIT received. signum=None, frame=None. It usually means one child failed."),
])
def test_deaths_are_named_by_cause(log, cls, line):
    s = verdicts(log)
    assert s["state"] == "crashed", s
    assert s["crash_class"] == cls, s
    assert s["line"] == line
    assert s["hint"]


def test_the_soft_watchdog_only_warns():
    s = verdicts(READY + P + "Scheduler watchdog timeout (self.watchdog_timeout=60, self.soft=True)\n" + ACCESS)
    assert s["state"] == "ready" and s["crash_class"] is None


def test_aborted_in_prose_is_not_a_signal():
    s = verdicts(READY + P0 + "Aborted request a1 because the client disconnected\n"
                 + P0 + "Killed 2 stale sessions\n" + ACCESS)
    assert s["state"] == "ready"


def test_every_class_has_a_one_line_hint():
    for cls in CRASH_CLASSES:
        assert HINTS[cls] and "\n" not in HINTS[cls]
    assert {"native_crash", "watchdog_timeout"} <= set(CRASH_CLASSES)


def test_a_new_format_ready_line():
    s = verdicts("2026-03-18 11:22:06.731 INFO 120984 [ http_server.py:2600] The server is fired up and ready to roll!\n")
    assert s["state"] == "ready"


# ------------------------------------------------------------------ copytruncate, then writes past the offset read
def test_copytruncate_rewritten_past_the_old_offset_is_read_from_the_start(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"[2026-03-18 11:22:06] first run line\n" * 3)
    f = LogFollower(str(p))
    assert f.read().count(b"\n") == 3
    new = (b"[2026-03-18 11:30:00] Scheduler hit an exception: Traceback (most recent call last):\n"
           b'  File "/x/scheduler.py", line 1, in run_scheduler_process\n'
           b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    with open(p, "r+b") as fh:  # copytruncate, then the writer goes on past the old size within one poll
        fh.truncate(0)
        fh.write(new)
    assert f.read() == new
    assert f.truncations == 1
    assert f.read() == b""


def test_plain_growth_is_not_taken_for_a_rewrite(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"a\n")
    f = LogFollower(str(p))
    assert f.read() == b"a\n"
    with open(p, "ab") as fh:
        fh.write(b"b\n" * 5000)
    assert f.read() == b"b\n" * 5000
    assert f.truncations == 0
