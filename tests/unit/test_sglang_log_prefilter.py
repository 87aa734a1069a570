"""The bulk scan's pre-filter (anchors and the shape gate): a line that matters is never skipped.

Every anchor and every crash signature is put, alone, in the middle of a healthy bulk stream (batch
statistics, access lines, tqdm bars with carriage returns, Triton's harmless error lines: several gate
blocks of repeating line shapes). Fed in one piece and in big chunks it must be seen by the bulk path
exactly as feeding the same stream line by line (the live path, which the gate never sees) sees it.
Dropping an anchor fails here.
"""
from __future__ import annotations

import functools
import random

import pytest

from ansible.module_utils import sglang_log
from ansible.module_utils.sglang_log import LogClassifier

ANCHORS = sglang_log._CRASH_ANCHORS + tuple(a for _, group in sglang_log._PHASE_ANCHORS for a in group)


class Spy(LogClassifier):
    """A classifier that records the lines it was given (with their line numbers)."""

    def __init__(self):
        super().__init__(clock=lambda: 0.0)
        self.fed = []

    def feed_line(self, line):
        self.fed.append((self.lineno + 1, line))
        super().feed_line(line)


def healthy_lines(n, seed=0):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        k = i % 6
        ts = "[2026-01-01 %02d:%02d:%02d TP%d] " % (i // 3600 % 24, i // 60 % 60, i % 60, i % 8)
        if k == 0:
            out.append(ts + "Decode batch. #running-req: %d, #token: %d, token usage: 0.%02d, cuda graph: True, "
                       "gen throughput (token/s): %d.%02d, #queue-req: 0, " % (
                           rnd.randint(1, 64), rnd.randint(100, 90000), rnd.randint(0, 99),
                           rnd.randint(10, 5000), rnd.randint(0, 99)))
        elif k == 1:
            out.append('INFO:     127.0.0.1:%d - "POST /generate HTTP/1.1" 200 OK' % rnd.randint(30000, 60000))
        elif k == 2:
            out.append("\r".join("Profiling batches (bs=%d avail_mem=%d.%02d GB): %3d%%|%-10s| %d/4 [00:%02d<00:%02d]"
                                 % (4 - j, rnd.randint(10, 80), rnd.randint(0, 99), 25 * j, "#" * (j * 2), j,
                                    rnd.randint(0, 59), rnd.randint(0, 59)) for j in range(5)))
        elif k == 3:
            out.append('loc("/sgl-workspace/sglang/python/sglang/srt/layers/attention/triton_ops/decode_attention.py'
                       '":%d:%d): error: operation scheduled before its operands'
                       % (rnd.randint(1, 900), rnd.randint(1, 40)))
        elif k == 4:
            out.append(ts + "The following error message 'operation scheduled before its operands' can be ignored.")
        else:
            out.append(ts + "Cache flushed successfully! %d" % rnd.randint(0, 10 ** 6))
    return out


HEALTHY = healthy_lines(7000)  # ~700 KiB: three gate blocks


def stream_with(line, at=None):
    lines = list(HEALTHY)
    at = len(lines) // 2 if at is None else at
    lines.insert(at, line)
    return ("\n".join(lines) + "\n").encode("utf-8"), at + 1


def verdict(clf):
    s = clf.summary()
    return s, clf.lineno, [(p["phase"], p["lineno"]) for p in clf.phases]


def bulk(data, chunk=None):
    clf = Spy()
    if chunk is None:
        clf.feed(data)
    else:
        for i in range(0, len(data), chunk):
            clf.feed(data[i:i + chunk])
    clf.finalize()
    return clf


@functools.lru_cache(maxsize=None)
def line_by_line(data):
    clf = Spy()
    for piece in data.splitlines(True):
        clf.feed(piece)
    clf.finalize()
    return clf


def test_anchors_hold_no_digit_or_line_break():
    # the shape gate deletes digits before it looks for anchors, and splits on line breaks
    for a in ANCHORS:
        assert not any(c in a.lstrip(b"\n") for c in b"0123456789\n\r"), a


def test_healthy_stream_holds_no_anchor_and_is_skipped_whole():
    data = ("\n".join(HEALTHY) + "\n").encode()
    assert len(data) > 2 * sglang_log._GATE_BLOCK
    for a in sglang_log._CRASH_ANCHORS:
        assert a not in data, a
    clf = bulk(data)
    assert clf.fed == []  # no line decoded at all
    assert clf._known  # the gate did the skipping
    assert clf.lineno == data.count(b"\n")
    assert clf.state == "loading" and clf.crash is None


@pytest.mark.parametrize("anchor", ANCHORS, ids=lambda a: a.decode("utf-8", "replace"))
@pytest.mark.parametrize("chunk", [None, 100 * 1024 + 7])
def test_each_anchor_alone_is_caught_by_the_bulk_path(anchor, chunk):
    text = anchor.lstrip(b"\n").decode("utf-8")
    line = "[2026-01-01 00:00:00 TP0] zz " + text + " zz"
    assert [a for a in ANCHORS if a.lstrip(b"\n") in line.encode()] == [anchor], "the test line holds one anchor"
    data, lineno = stream_with(line)
    clf = bulk(data, chunk)
    assert (lineno, line) in clf.fed
    assert clf.lineno == data.count(b"\n")


SIGNATURE_LINES = [
    "[2026-01-01 00:00:00] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
    "address already in use",
    "[2026-01-01 00:00:00] Initialization failed. warmup error: RuntimeError",
    "[2026-01-01 00:00:00] Disaggregation warmup failed",
    "[2026-01-01 00:00:00] Rank 0 scheduler died during initialization (exit code: -11)",
    "[2026-01-01 00:00:00] Rank 0 scheduler died during initialization (exit code: 255)",
    "[2026-01-01 00:00:00] Scheduler process died",
    "[2026-01-01 00:00:00] Rank 0 scheduler is dead. Please check if there are relevant logs.",
    "[2026-01-01 00:00:00 TP0] Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    "/workspace/csrc/sampling.cu:93: sampling_kernel: block: [0,0,0], thread: [3,0,0] Assertion `idx < n` failed.",
    "RuntimeError: CUDA error: device-side assert triggered",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA driver error: unspecified launch failure",
    "[2026-01-01 00:00:00 TP0] kernel launch returned cudaErrorLaunchFailure",
    "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
    "[rank3]:[E321 02:17:08.408271257 ProcessGroupNCCL.cpp:1484] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
    "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
    "collectives.",
    "[rank3]:[E321 02:17:08.408271257 ProcessGroupNCCL.cpp:1484] [PG ID 0 Rank 3] Process group watchdog thread "
    "terminated with exception: NCCL error: unhandled system error",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
    "ncclUnhandledCudaError: Call to CUDA function failed.",
    "[2026-01-01 00:00:00 TP0] Capture cuda graph failed: 'NoneType' object is not subscriptable",
    "Error limit reached.",
    "ninja: build stopped: subcommand failed.",
    '2 errors detected in the compilation of "/tmp/tmpx/kernel.cu".',
    "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.",
    "triton.compiler.errors.CompilationError: at 12:4:",
    "[2026-01-01 00:00:00] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    "[2026-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "[2026-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed.",
    "[2026-01-01 00:00:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
    "Fatal Python error: Segmentation fault",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "Segmentation fault (core dumped)",
    "[1]+  Aborted                 (core dumped) python3 -m sglang.launch_server --model-path m",
    "Bus error (core dumped)",
    "Killed",
    "start.sh: line 3:  1234 Killed                  python3 -m sglang.launch_server --model-path m",
    "已杀死",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2700, in run_scheduler_process',
    # signatures caught on a line of their own, with no traceback or other anchor next to them
    "[2026-01-01 00:00:00] Detokenizer process exited",
    "[2026-01-01 00:00:00 TP0] CUDA out of memory while capturing batch 256",
    "[2026-01-01 00:00:00 TP0] NCCL error in all_reduce, rank 3",
    "[2026-01-01 00:00:00 TP0] sampler: device-side assert triggered",
    "[2026-01-01 00:00:00 TP0] forward: unspecified launch failure",
    "Compilation terminated.",
    "/tmp/tmpx/kernel.cu(12): error: identifier \"__nv_fp8_e4m3\" is undefined",
    "/tmp/tmpx/common.cuh(7): error: expected a \";\"",
    "[2026-01-01 00:00:00 TP0] Scheduler hit an exception: see the rank 0 log",
    "[2026-01-01 00:00:00] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000)",
    "[2026-01-01 00:00:00] Subprocess scheduler_0 (pid=5) crashed with exit code -11. Triggering SIGQUIT for cleanup...",
    "[2026-01-01 00:00:00] Subprocess scheduler_0 (pid=5) crashed with exit code -9. Triggering SIGQUIT for cleanup...",
    "[2026-01-01 00:00:00] Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.0005.",
    "[2026-01-01 00:00:00] Not enought memory. Please try to increase --mem-fraction-static.",
    "ValueError: TP rank 3 could finish the model loading, but there are other ranks that didn't finish loading. "
    "It is likely due to unexpected failures (e.g., OOM) or a slow node.",
]


def test_every_signature_has_a_sample_line():
    covered = set()
    for line in SIGNATURE_LINES:
        for rx, cls, _ in sglang_log._SIGNATURES:
            if rx.search(line.lstrip()) or (rx.pattern.startswith("^(") and rx.match(line)):
                covered.add(rx.pattern)
    assert covered == {rx.pattern for rx, _, _ in sglang_log._SIGNATURES}


@pytest.mark.parametrize("line", SIGNATURE_LINES)
@pytest.mark.parametrize("chunk", [None, 1024 * 1024])
def test_each_signature_alone_is_caught_by_the_bulk_path(line, chunk):
    data, lineno = stream_with(line)
    live = line_by_line(data)
    assert live.crash is not None and live.crash["lineno"] == lineno, "the sample decides a crash on its own"
    clf = bulk(data, chunk)
    assert verdict(clf) == verdict(live)
    assert clf.crash["class"] == live.crash["class"]


EXTRA = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
    "ValueError: bad value",
    "[2026-01-01 00:00:00 TP0] Receive: obj=GenerateReqInput(text='Killed\n",
    "Traceback (most recent call last): inside a prompt')",
    "[2026-01-01 00:00:00] Load weight begin. avail mem=70.00 GB",
    "[2026-01-01 00:00:00] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB",
    "[2026-01-01 00:00:00] The server is fired up and ready to roll!",
    "[2026-01-01 00:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, ",
    "",
    "x\r",
] + SIGNATURE_LINES


@pytest.mark.parametrize("seed", range(8))
def test_bulk_feed_agrees_with_line_by_line_on_random_streams(seed):
    rnd = random.Random(seed)
    lines = healthy_lines(rnd.randint(3000, 6000), seed)
    for _ in range(rnd.randint(0, 4)):
        lines.insert(rnd.randrange(len(lines) + 1), rnd.choice(EXTRA))
    data = ("\n".join(lines) + rnd.choice(["\n", "", "\r\n"])).encode("utf-8")
    live = line_by_line(data)
    for chunk in (None, rnd.randint(40000, 400000)):
        assert verdict(bulk(data, chunk)) == verdict(live)


STOP_LINES = [
    "[2026-01-01 00:00:00] SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
    "[2026-01-01 00:00:00] Subprocess scheduler_0 (pid=5) crashed with exit code -15. Triggering SIGQUIT for cleanup...",
    "[2026-01-01 00:00:00] Gracefully exiting... Remaining number of requests 0",
    "[2026-01-01 00:00:00] INFO:     Shutting down",
]


@pytest.mark.parametrize("stop", STOP_LINES)
@pytest.mark.parametrize("chunk", [None, 100 * 1024 + 7])
def test_a_stop_alone_in_a_bulk_stream_is_seen(stop, chunk):
    """The stop line is read by the bulk path, so the teardown after it is no crash there either."""
    lines = list(HEALTHY)
    at = len(lines) // 2
    lines[at:at] = [stop, "[2026-01-01 00:00:00] SIGQUIT received. signum=None, frame=None. It usually means one child "
                    "failed.", "Killed"]
    data = ("\n".join(lines) + "\n").encode()
    live = line_by_line(data)
    assert live.crash is None and live.stopping == {"line": stop, "lineno": at + 1}
    clf = bulk(data, chunk)
    assert verdict(clf) == verdict(live)


def test_gate_rests_on_logs_of_unique_lines_and_still_catches():
    rnd = random.Random(7)
    letters = "abcfghjkmnpqrsuvwxyz"
    lines = ["".join(rnd.choice(letters) for _ in range(rnd.randint(40, 160))) for _ in range(30000)]
    lines.append("Segmentation fault (core dumped)")
    lines += lines[:2000]
    data = ("\n".join(lines) + "\n").encode()
    clf = bulk(data)
    assert clf._rest > 0  # the gate saw it did not pay and rests
    assert clf.crash is not None and clf.crash["class"] == "native_crash" and clf.crash["lineno"] == 30001
    assert clf.lineno == data.count(b"\n")
