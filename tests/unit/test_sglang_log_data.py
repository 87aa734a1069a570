"""Lines that are data or notices never decide a crash; the same words in a real error still do.

uvicorn's access line (SGLang's format: "[date] INFO:     addr - \"METHOD target HTTP/1.1\" status") carries the
client's own method, path and query string, so any client writes any word there. Warning and info lines (the
warnings module, logging levels, c10/glog "[W...]", NCCL_DEBUG output, the newer SGLang prefix's level) and
SGLang's own level-less notices that say they fall back or that something is deprecated report a way around,
not a death.
"""
from __future__ import annotations

import warnings

import pytest

from ansible.module_utils.sglang_log import LogClassifier, classify_bytes, is_notice, strip_prefix

from log_pieces import fed_in_pieces

READY = (
    "[2026-12-03 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n"
    "[2026-12-03 10:00:05 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB\n"
    "[2026-12-03 10:00:06] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)\n"
)
READY_LINE = "[2026-12-03 10:00:09] The server is fired up and ready to roll!\n"

# What a client can put in a request line (no spaces: the line is split on them), and what uvicorn logs.
ACCESS = [
    '[2026-12-03 10:00:07] INFO:     127.0.0.1:50420 - "GET /x?e=torch.OutOfMemoryError:CUDA_out_of_memory HTTP/1.1" 401 Unauthorized',
    '[2026-12-03 10:00:07] INFO:     127.0.0.1:50421 - "POST /v1/x?ncclSystemError&DistBackendError:NCCL_error_in: HTTP/1.1" 404 Not Found',
    '[2026-12-03 10:00:07] INFO:     127.0.0.1:50422 - "GET /Traceback%28most_recent_call_last%29 HTTP/1.1" 404 Not Found',
    '[2026-12-03 10:00:07] INFO:     127.0.0.1:50423 - "GET /?q=cudaErrorIllegalAddress&Segmentation_fault HTTP/1.1" 404 Not Found',
    '[2026-12-03 10:00:07] INFO:     127.0.0.1:50424 - "Traceback /Scheduler_hit_an_exception HTTP/1.1" 405 Method Not Allowed',
    '[2026-12-03 10:00:07] INFO:     127.0.0.1:50425 - "GET /?CompilationError:&ninja:build_stopped&what():=x HTTP/1.1" 404 Not Found',
    # behind a proxy with --proxy-headers, the client address is the client's own text too
    '[2026-12-03 10:00:07] INFO:     CUDA out of memory. Scheduler hit an exception:0 - "GET /health HTTP/1.1" 200 OK',
    '[2026-12-03 10:00:07] INFO:     Killed:0 - "GET /health HTTP/1.1" 200 OK',
    # the same line as a container runtime wraps it
    '2026-12-03T10:00:07.123456789Z stderr F [2026-12-03 10:00:07] INFO:     10.0.0.9:1 - "GET /?OutOfMemoryError: HTTP/1.1" 404 Not Found',
]

NOTICES = [
    # the warnings module, with the source line it quotes
    "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:61: FutureWarning: torch.cuda.OutOfMemoryError is "
    "deprecated, use torch.OutOfMemoryError\n  import pynvml  # type: ignore[import]",
    "UserWarning: NCCL error reporting is off: set TORCH_NCCL_ASYNC_ERROR_HANDLING=3 to abort on an NCCL error",
    # c10 / glog warnings, alone and behind torch's rank tag
    "[W1203 10:00:01.123456789 ProcessGroupNCCL.cpp:1032] Warning: TORCH_NCCL_ASYNC_ERROR_HANDLING is deprecated; "
    "an NCCL error: will abort the process",
    "[rank0]:[W1203 10:00:01.123456789 ProcessGroupNCCL.cpp:4561] Warning: DistBackendError: handling moved to the watchdog",
    # logging levels at the line's start
    "WARNING:sglang.srt.layers.quantization:deep_gemm missing (ModuleNotFoundError); CUDA out of memory checks use torch",
    "[2026-12-03 10:00:01] WARNING: flashinfer JIT failed (CompilationError: nvcc exited 1), using the triton kernels",
    "2026-03-18 11:22:06.731 WARNING 120984 [ TP0 model_runner.py:512] CUDA out of memory while probing batch sizes",
    "INFO 12-03 10:00:01 [__init__.py:239] Automatically detected platform cuda. NCCL error: none",
    # NCCL_DEBUG output: the real failure follows as an exception that decides
    "gpu01:1234:1290 [0] NCCL WARN Cuda failure 'out of memory'",
    "gpu01:1234:1290 [0] NCCL INFO NCCL_ASYNC_ERROR_HANDLING set by environment to 1 (NCCL error: abort)",
    # SGLang's own logger has no level: a notice says it falls back, or that something is deprecated
    "[2026-12-03 10:00:01 TP0] flashinfer JIT: CompilationError: nvcc failed for sm_100a; falling back to triton",
    "[2026-12-03 10:00:01 TP0] sgl_kernel build: ninja: build stopped: subcommand failed. Fallback to torch native.",
    "[2026-12-03 10:00:01] --enable-nccl-nvls is deprecated; NCCL error: handling is unchanged",
]


def verdict(text):
    return classify_bytes(text.encode("utf-8"))


@pytest.mark.parametrize("line", ACCESS)
def test_an_access_line_is_data_whatever_the_client_wrote(line):
    clf = verdict(READY + line + "\n" + READY_LINE)
    assert clf.crash is None and clf.state == "ready", clf.crash


@pytest.mark.parametrize("line", NOTICES)
def test_a_notice_decides_nothing(line):
    clf = verdict(READY + line + "\n" + READY_LINE)
    assert clf.crash is None and clf.state == "ready", (line, clf.crash)


@pytest.mark.parametrize("line", ACCESS + NOTICES)
def test_a_real_crash_after_data_and_notices_is_decided_by_its_own_line(line):
    crash = ("[2026-12-03 10:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
             "    scheduler.event_loop_overlap()\n"
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.72 GiB.\n")
    clf = verdict(READY + line + "\n" + READY_LINE + crash)
    assert clf.crash is not None and clf.crash["class"] == "cuda_oom"
    assert clf.crash["line"].startswith("[2026-12-03 10:00:10 TP0] Scheduler hit an exception")


@pytest.mark.parametrize("line, cls", [
    # the same words in the shapes the real errors have still decide
    ("[2026-12-03 10:00:01 TP0] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "cuda_oom"),
    ("2026-03-18 11:22:06.731 ERROR 120984 [ TP0 scheduler.py:3190] CUDA out of memory. Tried to allocate 1 GiB", "cuda_oom"),
    ("[E1203 10:00:01.123456789 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group "
     "watchdog thread terminated with exception: NCCL error: unhandled cuda error", "nccl"),
    ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error", "nccl"),
    ("[2026-12-03 10:00:01 TP0] Capture cuda graph failed: CUDA error: an illegal memory access was encountered",
     "cuda_error"),
    ("ninja: build stopped: subcommand failed.", "compile_error"),
    # a level-less line may say "fallback" and still be an error when its prefix says so
    ("2026-03-18 11:22:06.731 ERROR 120984 [ TP0 cuda_graph_runner.py:410] Capture cuda graph failed: CUDA out of "
     "memory (no fallback)", "cuda_oom"),
])
def test_the_same_words_in_an_error_still_decide(line, cls):
    clf = verdict(READY + line + "\n")
    assert clf.crash is not None and clf.crash["class"] == cls, (line, clf.crash)


def test_data_and_notices_stay_silent_when_the_log_arrives_in_random_pieces():
    text = (READY + "\n".join(ACCESS + NOTICES) + "\n" + READY_LINE).encode("utf-8")
    for seed in range(20):
        clf = fed_in_pieces(text, seed, 300)
        clf.finalize()
        assert clf.crash is None and clf.state == "ready"


def test_is_notice_reads_the_level_that_the_prefix_carries():
    line = "[W1203 10:00:01.123456789 ProcessGroupNCCL.cpp:1032] anything"
    body, _ = strip_prefix(line)
    assert is_notice(line, body)
    line = "[E1203 10:00:01.123456789 ProcessGroupNCCL.cpp:1032] anything"
    body, _ = strip_prefix(line)
    assert not is_notice(line, body)


# ------------------------------------------------------------------ what real SGLang prints below ERROR
def _message(node):
    """A logging call's message as it would print, placeholders filled ("X", "1"); None when not a literal."""
    import ast
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        text = _message(node.left)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        text = _message(node.func.value)
    else:
        return None
    if text is None:
        return None
    for spec, value in (("%s", "X"), ("%d", "1"), ("%r", "'X'"), ("%.2f", "1.00"), ("%.1f", "1.0")):
        text = text.replace(spec, value)
    return text


def _notices_of(version):
    """(file:line, message) of every logger.info/warning/debug call with a literal message in a release's srt/."""
    import ast
    import zipfile
    from sglang_src import wheel_path
    found = []
    with zipfile.ZipFile(wheel_path(version)) as whl:
        for name in whl.namelist():
            if not (name.startswith("sglang/srt/") and name.endswith(".py")):
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # SGLang's own invalid escapes (SyntaxWarning)
                    tree = ast.parse(whl.read(name).decode("utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
                        and node.func.attr in ("info", "warning", "warn", "debug", "info_once", "warning_once")):
                    msg = _message(node.args[0])
                    if msg:
                        found.append(("%s:%d" % (name, node.lineno), msg))
    return found


# Logged below ERROR, yet a real failure that health shows too: the server is marked unhealthy.
REAL_FAILURES_BELOW_ERROR = ("Disaggregation warmup failed",)


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_no_info_or_warning_that_sglang_really_logs_reads_as_a_crash(version):
    notices = _notices_of(version)
    assert len(notices) > 2000  # the whole srt/ tree was read
    wrong = []
    for where, msg in notices:
        if msg.startswith(REAL_FAILURES_BELOW_ERROR):
            continue
        text = "".join("[2026-12-03 10:00:00 TP0] %s\n" % line for line in msg.split("\n"))
        clf = classify_bytes(READY.encode() + text.encode("utf-8") + READY_LINE.encode())
        if clf.crash is not None:
            wrong.append((where, clf.crash["class"], msg[:120]))
    assert wrong == []


# ------------------------------------------------------------------ a raw echo before a real crash
_FAKE_OOM = (b"[2026-12-03 09:24:18] Receive: obj=GenerateReqInput(rid='1', text='hi', input_ids=None, sampling_params={})\n"
             b"[2026-12-03 09:24:19 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
             b'  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
             b"    scheduler.event_loop_overlap()\n"
             b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.72 GiB.\n")
_REAL_NCCL = (b"[2026-12-03 09:24:20 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
              b'  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
              b"    scheduler.event_loop_overlap()\n"
              b"torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
              b"[2026-12-03 09:24:21] Received sigquit from a child process. It usually means the child failed.\n")


def test_after_a_raw_echo_the_latest_crash_explains_and_the_class_is_uncertain():
    from ansible.module_utils import sglang_verdict
    clf = LogClassifier(clock=lambda: 0.0)
    clf.feed(b"[2026-12-03 09:24:00] The server is fired up and ready to roll!\n" + _FAKE_OOM + _REAL_NCCL)
    clf.finalize()
    assert clf.crash["class"] == "nccl" and "DistBackendError" in clf.crash["exception"]
    assert [c["class"] for c in clf.superseded] == ["cuda_oom"]
    assert clf.crash_after_raw_echo() == 2
    fields, _ = sglang_verdict.explain("exited", clf, {"pid": 1, "log_path": "/x.log"}, 1.0, 1, None, False,
                                     candidates={"leader": object()})
    assert fields["crash_class"] == "nccl" and fields["class_uncertain"] is True
    assert "The class is uncertain: a raw request echo (line 2" in fields["hint"] and "1 earlier crash line set aside" in fields["hint"]


def test_without_a_raw_echo_the_first_crash_stays_and_the_class_is_certain():
    from ansible.module_utils import sglang_verdict
    clf = LogClassifier(clock=lambda: 0.0)
    clf.feed(_FAKE_OOM.split(b"\n", 1)[1] + _REAL_NCCL)  # no echo: both tracebacks are the server's own
    clf.finalize()
    assert clf.crash["class"] == "cuda_oom" and clf.superseded == [] and clf.crash_after_raw_echo() is None
    fields, _ = sglang_verdict.explain("exited", clf, {"pid": 1, "log_path": "/x.log"}, 1.0, 1, None, False,
                                     candidates={"leader": object()})
    assert "class_uncertain" not in fields and "uncertain" not in fields["hint"]
