# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Follow a growing SGLang server log and decide, line by line, what the server is doing.

Standard library only: this file is shipped to the target with the modules that import it
(``from ansible.module_utils.sglang_log import ...``) and is also used on the controller by
``bin/sglang-logcheck`` and the benchmarks.

Two pieces:

* :class:`LogFollower` reads a file by byte offset, never twice, and survives truncation and
  replacement (rotation) of the file.
* :class:`LogClassifier` takes bytes (partial lines allowed), splits them into lines on ``\\n``
  and ``\\r`` (tqdm), drops NUL bytes, and keeps the verdict: ``state`` (loading, ready,
  crashed), the ``phase`` timeline with shard progress, and for a crash its class, a hint for
  the operator, the deciding line and the traceback.

The rules were written against real SGLang logs (``tests/data/sglang-logs``, labelled); see
``docs/DESIGN.md`` and the comments below for why each rule is the way it is.
"""

from __future__ import annotations

import os
import re
import time

# --------------------------------------------------------------------------------------------
# Phases, in the order a healthy start goes through them. A phase never moves backwards:
# ranks interleave, and a late "Loading ... shards" line from rank 5 does not undo rank 0's
# "Load weight end".
from .sglang_contract import PHASES
_PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}

CRASH_CLASSES = (
    "python_exception",
    "bad_config",
    "warmup_failed",
    "first_request_crash",
    "cuda_graph_capture",
    "cuda_oom",
    "kv_pool_oom",
    "cuda_error",
    "nccl",
    "compile_error",
    "child_sigquit",
    "killed",
    "port_in_use",
    "native_crash",
    "watchdog_timeout",
    "load_barrier_timeout",
)

HINTS = {
    "python_exception": "a scheduler raised an exception; read the traceback in log_tail",
    "bad_config": "the server arguments, environment, model config or installed dependencies are wrong; "
                  "fix what the exception names and re-run",
    "warmup_failed": "the server's own warm-up request failed (an HTTP proxy in the environment is the usual "
                     "cause: set no_proxy=127.0.0.1,localhost)",
    "first_request_crash": "the server crashed on its first request; for \"'EAGLEWorkerV2' object has no "
                           "attribute\" apply the early-init patch (sglang_patch_enabled: true)",
    "cuda_graph_capture": "CUDA-graph capture failed: try a smaller --cuda-graph-max-bs, another attention "
                          "backend, or --disable-cuda-graph to confirm",
    "cuda_oom": "CUDA out of memory: lower --mem-fraction-static or --cuda-graph-max-bs, or free the GPUs "
                "(look for foreign processes with nvidia-smi)",
    "kv_pool_oom": "SGLang's memory-pool check failed: raise --mem-fraction-static, lower --context-length, "
                   "or use more GPUs",
    "cuda_error": "a CUDA kernel failed (device-side assert or illegal access); rerun with "
                  "CUDA_LAUNCH_BLOCKING=1 to locate it",
    "nccl": "NCCL failed: check NCCL_* variables, /dev/shm size, P2P/IB; rerun with NCCL_DEBUG=INFO",
    "compile_error": "a JIT kernel build (Triton/FlashInfer/nvcc) failed: check the CUDA toolkit against "
                     "the GPU architecture and clear the JIT cache",
    "child_sigquit": "a child process of the server failed and the launcher tore everything down; its own "
                     "traceback is above in the log (or it was killed: dmesg -T | grep -i oom)",
    "killed": "a server process died by a signal or exit code (the kernel OOM killer is the common cause: "
              "dmesg -T | grep -i oom)",
    "port_in_use": "the port is already taken: stop the other server or choose another port",
    "native_crash": "a server process died in native code (segfault, abort, C++ exception) with no Python "
                    "traceback: read the faulthandler or what() lines in log_tail; a core dump (coredumpctl) "
                    "locates it",
    "load_barrier_timeout": "a multi-node (or multi-rank) server: this rank finished loading but another did not within "
                            "SGLang's load barrier (480 s): look at the other nodes' logs for the rank that failed "
                            "or is slow (OOM, a slow disk, a node that never started)",
    "watchdog_timeout": "SGLang's watchdog saw a forward pass make no progress for --watchdog-timeout seconds "
                        "(a hung kernel or collective, often one rank stuck): read the py-spy dump above it",
}

# The crash catalogue: crashes SGLang's speculative decoding (EAGLE, EAGLE3, MTP/NextN, spec v2) is known for, each
# with the fix or workaround its SGLang issue thread names. An entry does not change a crash's class (the class says
# what failed: a Python exception, a CUDA fault); it names the known cause (``crash["cause"]``, the result's
# ``crash_cause``) and its hint replaces the class's generic one. It is looked for only in the crash's own lines (its
# deciding line, exception and traceback: server lines, never a request echo, an access line or a client's error, which
# are data), so a prompt that quotes a signature decides nothing and names nothing. Each entry is tested on the real
# log lines of its thread (tests/data/sglang-logs-spec, docs/crash-catalogue.md). (id, regex, hint), first match wins.
CATALOGUE = (
    ("spec_draft_extend_metadata_none",
     re.compile(r"\bAll of them must not be None\b"),
     "EAGLE/MTP draft-extend found its batch metadata unset under the overlap scheduler (SGLang #29785, v0.5.14 "
     "ROCm, DSA attention; fix proposed in PR #30217): add --disable-overlap-schedule "
     "(sglang_server_extra_args: {disable-overlap-schedule: true})"),
    ("spec_draft_extend_gather_oob",
     re.compile(r"vectorized gather kernel index out of bounds|vectorized_gather_kernel: .*Assertion .*ind_dim_size"),
     "a gather kernel indexed out of bounds; with speculative decoding this is SGLang's known EAGLE draft-extend "
     "race under spec v2 and the overlap scheduler at high concurrency (#15638 v0.5.6.post2, #15399 v0.5.6.post1, "
     "#18744, #37936): add --disable-overlap-schedule (sglang_server_extra_args: {disable-overlap-schedule: true}) "
     "or lower --max-running-requests, or upgrade SGLang"),
    ("spec_draft_mla_backend",
     re.compile(r"\b(?:trtllm_mla|flashmla|cutlass_mla) backend can only be used with MLA models"),
     "the EAGLE3 draft (not MLA) inherited the MLA target's attention backend (Kimi K2.5/K2.6 on B200/GB300; "
     "SGLang #23490, PR #20298): set the draft's own backend with --speculative-draft-attention-backend trtllm_mha "
     "(sglang_server_extra_args: {speculative-draft-attention-backend: trtllm_mha})"),
)
CAUSES = tuple(entry[0] for entry in CATALOGUE)


def crash_cause(lines):
    """The catalogue entry ``(id, hint)`` that a crash's own lines (its deciding line, exception and traceback) name,
    or None."""
    for line in lines:
        if not line:
            continue
        text = strip_prefix(line)[0].strip()
        for cause, rx, hint in CATALOGUE:
            if rx.search(text):
                return cause, hint
    return None


# How specific a class is. Later evidence replaces an earlier verdict only when it is more specific
# (innermost cause first): an NCCL error inside a C++ abort is "nccl", the launcher's traceback after a
# segfault does not turn "native_crash" back into "python_exception".
_RANK = {"python_exception": 0, "child_sigquit": 0}
_RANK.update((c, 1) for c in ("killed", "native_crash", "first_request_crash", "bad_config", "warmup_failed",
                              "cuda_graph_capture", "watchdog_timeout"))
_RANK.update((c, 2) for c in ("cuda_oom", "kv_pool_oom", "cuda_error", "nccl", "compile_error", "port_in_use",
                              "load_barrier_timeout"))

# Prefixes that wrap SGLang's own lines: Ray actor tags, container runtime timestamps (docker's
# "...Z ", the CRI format "2026-03-18T11:22:06.731234567+08:00 stderr F "), compose service names,
# torch's per-rank tag "[rank0]:" and glog headers "[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] ".
_CRI = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? (stdout|stderr) ([FP]) ")
_OUTER_PREFIX = re.compile(
    r"^(?:\(\S+ pid=\d+(?:, ip=[\d.]+)?\) ?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? "
    r"(?:(?:stdout|stderr) [FP] )?|\S+ +\| |\[rank\d+\]: ?|\[[EWIF](?:\d{4} \d\d:\d\d:\d\d\.\d+)?(?: +\d+)? ?[\w.]+:\d+\] )*"
)
# SGLang's logging prefix: [2025-01-01 12:00:00 DP1 TP3 EP3], [17:43:23 TP6], [2025-01-01 12:00:00],
# with milliseconds (SGLANG_LOG_MS), the multimodal server's [12-16 14:27:08], and the newer
# "2026-03-18 11:22:06.731 ERROR 120984 [ TP0 scheduler.py:3190] " (level, pid, rank and source).
_SGLANG_PREFIX = re.compile(
    r"^(?:\[(?:\d{4}-\d\d-\d\d |\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?(?:\s+[A-Z]{2,4}\d+)*\]|"
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? +(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL) +\d+ +\[[^\]]*\])\s?"
)
# A request echoed by --log-requests (SGLang's request logger: "Receive: obj=GenerateReqInput(...)",
# "Finish: obj=..., out={...}", "Receive OpenAI: obj={...}", the JSON format, the oldest "in=...").
# Its text is user data: never evidence, never the start of a traceback.
_ECHO = re.compile(r'^(?:(?:Receive(?: OpenAI)?|Finish): obj=|in=\w+\(|\{"timestamp": "[^"]*", "event": "request\.)')
# Where an echoed request's text begins, and how an echo line ends: the field after the text
# (", input_ids=...", ", sampling_params=...") and the object's closing ")" or "}" (Finish: "..., out={...}").
# Older SGLang wrote the text raw, not repr()'d: a prompt's newlines then make new physical lines, any of which
# may look like an SGLang line (a pasted log with its own "[date] Scheduler hit an exception"). So an echo
# whose first line does not end the object goes on, as data, until a line that does, whatever that line's
# prefix, for at most _ECHO_MAX bytes (SGLang truncates logged text to --log-requests-level's max length).
# uvicorn's access line (SGLang keeps uvicorn's access log on, with its own format: "[date] INFO:     127.0.0.1:50420
# - \"GET /health HTTP/1.1\" 503 Service Unavailable"): the method, the path and the raw query string are the client's
# own text (and, behind a proxy, the client address too). Any client can write any word there, with or without the
# API key (a 401 and a 404 are logged too), so such a line is data: it never decides and never opens a traceback.
_ACCESS = re.compile(r'^(?:\x1b\[[0-9;]*m)?(?:INFO|DEBUG|TRACE|WARNING|ERROR|CRITICAL)(?:\x1b\[[0-9;]*m)?: +.* - ".*" '
                     r'(?:\x1b\[[0-9;]*m)?\d{3}\b')
_ACCESS_HEAD = re.compile(r'^(?:\x1b\[[0-9;]*m)?(?:INFO|DEBUG|TRACE|WARNING|ERROR|CRITICAL)(?:\x1b\[[0-9;]*m)?: +.*? - "')
# Lines that say what they are, and are not errors: a logging level below ERROR at the line's start (Python's
# default "WARNING:name:msg", uvicorn's "INFO:     ...", vLLM-style "INFO 12-03 ..."), the warnings module
# ("path:lineno: FutureWarning: msg", a bare "UserWarning: msg"), NCCL_DEBUG output ("host:pid:tid [0] NCCL WARN
# ..."), c10/glog warnings and infos ("[W1203 10:00:00.000 ProcessGroupNCCL.cpp:123] ..."), and the newer SGLang
# prefix's own level ("2026-... WARNING 1234 [ TP0 file.py:12] "). A signature word in such a line (a deprecation
# notice naming OutOfMemoryError, an NCCL setting that mentions errors, a JIT fallback that quotes its compile
# error) decides nothing.
_NOTICE_BODY = re.compile(
    r"^(?:\x1b\[[0-9;]*m)?(?:WARNING|WARN|INFO|DEBUG|NOTICE|TRACE)(?:\x1b\[[0-9;]*m)?(?::|\s)|"
    r"^[\w.]*Warning: |^\S.*?:\d+: [\w.]*Warning: |^\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE) |^Warning: ")
_NOTICE_PREFIX = re.compile(r"\[[WI](?:\d{4} \d\d:\d\d:\d\d\.\d+)?(?: +\d+)? ?[\w.]+:\d+\] |"
                            r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? +(?:DEBUG|INFO|WARNING|WARN) ")
# SGLang's own logger prints no level: a warning there is told by what it says. A line outside a traceback that
# is not an exception line and says it falls back, or that something is deprecated, reports a way around.
_NOTICE_WORDS = re.compile(r"\bfall(?:s|ing)? ?back\b|\bfallback\b|\bdeprecat(?:ed|ion)\b|\bwill be removed\b", re.I)


_ERROR_PREFIX = re.compile(r"\[[EF](?:\d{4} \d\d:\d\d:\d\d\.\d+)?(?: +\d+)? ?[\w.]+:\d+\] |"
                           r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? +(?:ERROR|CRITICAL|FATAL) ")


def line_level(line, body):
    """``"notice"`` for a line that says it is a warning or info, ``"error"`` for one whose prefix says error or
    fatal, None when the line says nothing of its level (SGLang's own format). ``body``: the line without its
    prefixes (strip_prefix)."""
    if _NOTICE_BODY.match(body):
        return "notice"
    prefix = line[:len(line) - len(body)] if line.endswith(body) else ""
    if not prefix:
        return None
    if _NOTICE_PREFIX.search(prefix) is not None:
        return "notice"
    return "error" if _ERROR_PREFIX.search(prefix) is not None else None


def is_notice(line, body):
    """Whether a log line is a warning or info line by its own words or prefix (see line_level)."""
    return line_level(line, body) == "notice"


_ECHO_MULTI = re.compile(r"^(?:(?:Receive|Finish): obj=\w+\(|in=\w+\()")
# SGLang's per-request errors built from the client's own input: "[http_server] Error: {e}" (a ValueError such as
# "Duplicate request ID detected: <rid>", LoRA adapter names), never a server crash. Data.
_CLIENT_ERROR = "[http_server] Error: "
# A client-chosen request id inside SGLang's own lines ("..., self.rid='<anything>'", "rid=<anything>"): data.
_RID = re.compile(r"""\b(?:(?:self|req|obj)\.)?rid=(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)""")
_ECHO_TEXT = re.compile(r"\btext=['\"]")
_ECHO_TAIL = re.compile(r"['\"], [a-z_]+=")
_ECHO_MAX = 256 * 1024


def _echo_ends(text):
    """Whether an echo line (from its text field on) closes the echoed object."""
    text = text.rstrip()
    return text.endswith(("')", '")')) or (text.endswith((")", "}")) and _ECHO_TAIL.search(text) is not None)


def _echo_left(body):
    """Bytes an echo starting with this line may still span (None: the line is the whole echo)."""
    m = _ECHO_TEXT.search(body)
    if m is None or _echo_ends(body[m.end():]):
        return None
    return _ECHO_MAX - len(body)


# SGLang's own check that the KV cache (memory pool) fits, in every wording it has had: "Not enought memory.
# Please try to increase --mem-fraction-static." (the oldest), "Not enough memory. Please try to increase
# --mem-fraction-static.[ Current value: mem_fraction_static=...]" (max_total_num_tokens <= 0: model_runner, later
# MemoryPoolConfig), "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. ... increase
# --mem-fraction-static", and 0.5.17's "Loaded weights leave no GPU memory for the KV cache under
# --mem-fraction-static=X. Raise --mem-fraction-static above Y". One cause: too little memory is left for the pool
# once the weights are in. Not torch's "CUDA out of memory" (an allocation that failed).
_KV_POOL = re.compile(r"Not enought? (?:GPU )?memory\b.*?(?:mem[-_]fraction[-_]static|KV cache|memory pool|state cache)|"
                      r"leaves? no (?:GPU )?memory for (?:the )?KV cache|no (?:GPU )?memory left for (?:the )?KV cache")
# SGLang's load barrier timed out: this rank loaded, another rank (often on another node) did not.
_BARRIER = re.compile(r"TP rank \d+ could finish the model loading, but there are other ranks that didn't finish loading")
# SGLang's subprocess watchdog in the launcher (0.5.x, utils/watchdog.py SubprocessWatchdog): "Subprocess
# scheduler_0 (pid=N) crashed with exit code C. Triggering SIGQUIT for cleanup..." (only "crashed with exit code
# C." where fail-stop is off), and the verbose variant "Subprocess NAME (pid=N) is gone: killed by SIGKILL (exit
# code -9)." / "... is gone: exit code 1.". It reports every non-zero exit, so also a child that a stop (SIGTERM to
# the process tree) ended: -15 (SIGTERM) and -2 (SIGINT) are a shutdown, not a crash. -9 is a SIGKILL from outside
# (the OOM killer, kill -9, a stop's escalation, SGLang's own kill_process_tree); SIGSEGV/SIGABRT/SIGBUS/SIGILL/
# SIGFPE are a native crash (a signature below).
_CHILD_EXIT = re.compile(r"Subprocess (\S+) \(pid=\d+\) (?:crashed with exit code|is gone: (?:killed by \w+ \()?exit code) "
                         r"(-?\d+)")
_STOP_CODES = (-15, -2)
# An orderly shutdown as SGLang and uvicorn log it: the tokenizer manager's SIGTERM handler ("SIGTERM received.
# signum=... frame=... Draining requests and shutting down..."), its drain ("Gracefully exiting... Remaining number
# of requests 0"), uvicorn's "Shutting down".
_STOP = re.compile(r"^(?:SIGTERM received\b|Gracefully exiting\.\.\.|(?:INFO: +)?Shutting down$)")
# What a stop brings about, never a crash of its own: the launcher's SIGQUIT teardown after a child the stop
# ended, children reported dead or killed (kill_process_tree and a stop's escalation send SIGKILL).
_STOP_CONSEQUENCES = ("child_sigquit", "killed")

# Line signatures that prove a crash on their own. (regex, class, final?) in priority order.
# "final" classes are not refined by the traceback that follows.
_SIGNATURES = [
    (re.compile(r"address already in use|\[Errno 98\]", re.I), "port_in_use", True),
    (re.compile(r"Initialization failed\. ?warmup error|Disaggregation warmup failed"), "warmup_failed", True),
    # The launcher's word on a dead scheduler; its exit code names the signal (-11 SIGSEGV, -6 SIGABRT, ...).
    (re.compile(r"scheduler died during initialization \(exit code: -(?:11|6|7|4|8)\)|"
                r"Subprocess \S+ \(pid=\d+\) (?:crashed with exit code|is gone: killed by \w+ \(exit code) -(?:11|6|7|4|8)\b",
                re.I), "native_crash", False),
    (re.compile(r"scheduler died during initialization|scheduler (?:process )?died\b|"
                r"(?:Scheduler|Detokenizer|TokenizerManager)\S* (?:process )?(?:exited|is dead)", re.I),
     "killed", False),
    # torch's exception (its name followed by its message, or alone), or the allocator's words.
    (re.compile(r"Capture cuda graph failed.*(?:out of memory)|(?:CUDA|HIP) out of memory|OutOfMemoryError(?::|\s*$)"),
     "cuda_oom", True),
    (_KV_POOL, "kv_pool_oom", True),
    # CUDA before NCCL: "watchdog thread terminated with exception: CUDA error: ..." is a CUDA fault that
    # NCCL's watchdog only reported.
    (re.compile(r"\.cuh?:\d+: \w+: block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion .* failed|"
                r"device-side assert triggered|illegal memory access was encountered|"
                r"CUDA (?:driver )?error: (?!out of memory)|unspecified launch failure|cudaError(?!Memory)\w+"),
     "cuda_error", True),
    # torch's "NCCL error in: <file>:<line>, <reason>" and SGLang's pynccl "NCCL error: <reason>" (not a setting
    # that names "NCCL error handling" or "NCCL error-reporting").
    (re.compile(r"NCCL error(?: in\b|:)|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|"
                r"Watchdog caught collective operation timeout|ProcessGroupNCCL's watchdog got stuck|"
                r"Process group watchdog thread terminated with exception|DistBackendError"), "nccl", True),
    (re.compile(r"Capture cuda graph failed"), "cuda_graph_capture", True),
    # SGLang's load barrier (model_runner.load_model, dist.monitored_barrier, UNBALANCED_MODEL_LOADING_TIMEOUT_S):
    # "ValueError: TP rank N could finish the model loading, but there are other ranks that didn't finish loading."
    (_BARRIER, "load_barrier_timeout", True),
    (re.compile(r"^Error limit reached\.|^Compilation terminated\.|ninja: build stopped|"
                r"\.cuh?\(\d+\): error:|errors? detected in the compilation of|"
                r"CalledProcessError: Command '\['ninja'|CompilationError: "), "compile_error", True),
    # SGLang's own watchdog (scheduler, detokenizer, tokenizer): the hard one SIGQUITs the server; the
    # soft one (self.soft=True) only logs.
    (re.compile(r"[Ww]atchdog timeout \((?:self\.)?watchdog_timeout=[\d.]+(?:, (?:self\.)?soft=False)?\)"),
     "watchdog_timeout", True),
    (re.compile(r"Scheduler hit an exception"), "python_exception", False),
    (re.compile(r"Received sigquit from a child proces|SIGQUIT received"), "child_sigquit", False),
    # Process deaths with no Python traceback: CPython's faulthandler, a C++ std::terminate (its what()
    # line, below, names the cause), a shell's job line ("Segmentation fault (core dumped)",
    # "start.sh: line 3: 1234 Killed   python3 -m sglang...", "[1]+  Aborted ...").
    (re.compile(r"^(?:Fatal Python error: |terminate called (?:after throwing|recursively|without an active)|"
                r"(?:(?:\S.*?: line \d+: +|\[\d+\][+-]? +)?\d+ +|\[\d+\][+-]? +)?(?:Segmentation fault|Aborted|Bus error)"
                r"(?: +\(core dumped\))?(?:\s*$| {2,}\S| \S*python))"),
     "native_crash", False),
    (re.compile(r"^(?:(?:(?:\S.*?: line \d+: +|\[\d+\][+-]? +)?\d+ +|\[\d+\][+-]? +)?(?:Killed|已杀死)"
                r"(?:\s*$| {2,}\S| \S*python))"), "killed", True),
]
# Patterns that start with "^" are tried at the line start only (match): search() would retry them at
# every position of a long line.
_LOOKS = [((rx.match if rx.pattern.startswith("^(") else rx.search), cls, final) for rx, cls, final in _SIGNATURES]
_WHAT = re.compile(r"^\s+what\(\):\s+(.*)")

# Pre-filter for the bulk scan. Literal anchors: a line that holds none of them cannot change the
# verdict (unless a traceback block, a request echo or a partial CRI record is open: then every line is
# read). Progress lines (tqdm bars, batch statistics) are frequent, so they are looked at only while they
# can still move the phase (the phase anchors below); their counters are kept with C-speed counts over the
# skipped text instead.
#
# Two stages. Each anchor is searched with bytes.find (C, 1-4 GB/s), but every anchor is one more pass
# over the text (23 anchors cost ~12 ms/MiB), so big reads go through a shape gate first (see
# LogClassifier._gate): a block of whole lines has its digits deleted (bytes.translate) and is split into
# line shapes; healthy logs repeat a few hundred shapes (batch statistics, bars, access lines differ only
# in their numbers), so after the set of shapes already proven anchor-free is taken away, little or
# nothing is left to search. No anchor holds a digit, so an anchor in a line is also in its shape: a block
# whose new shapes hold no anchor is skipped whole (its newlines counted from the split). Only the anchors
# found in a block's new shapes are then searched for in that block, with the next position of each
# cached. Small reads (a live log) skip the gate.
_CRASH_ANCHORS = (
    # Exception lines inside a traceback need no anchor of their own: an open block makes every line
    # count. But every signature is also anchored on its own (a logger line, a C++ abort's what(), a rank's
    # line printed without its traceback), since the anchors cost little behind the shape gate: "exited"
    # (Detokenizer/Scheduler ... exited), "out of memory" and "OutOfMemoryError" (torch, HIP, capture), the NCCL
    # words, "device-side assert", "illegal memory access", "unspecified launch failure", nvcc's
    # "Compilation terminated." and "file.cu(N): error:" (".cu(", ".cuh("), "hit an exception" (Scheduler hit an
    # exception, with or without its traceback on the line), "[Errno " (98, address in use), "xit code" (the
    # subprocess watchdog's "crashed with exit code", "Exit code: -9"), "mem-fraction-static" (every wording of
    # the KV pool check names it). A stop is anchored too ("SIGTERM received", "Draining requests", "Gracefully
    # exiting", "Shutting down"): what follows it is read in its light.
    # Both sigquit wordings ("Received sigquit from a child proces(s). It usually means the child failed.",
    # "SIGQUIT received. ... It usually means one child failed.") end in "child failed".
    # nvcc ends its errors with "N error(s) detected in the compilation of ...".
    # "Error: " is every exception line (torch.OutOfMemoryError, DistBackendError, CompilationError); the
    # C-level ones are "CUDA error: ", "CUDA driver error: ", "Fatal Python error: " (not a bare "error: ":
    # Triton's harmless 'loc(...): error:' lines are frequent, and each hit costs a decode and the regexes).
    # "atchdog " is SGLang's and torch's watchdogs (not server_args' "watchdog_timeout=", a long line to
    # decode). "ailed" is every "... failed" (capture, warm-up, "Assertion `...' failed", sigquit's "child
    # failed", "ninja: build stopped: subcommand failed"); the signal names and "已杀死" are the shell's job
    # lines; ": obj=" a request echo (its continuation lines are data). No anchor may hold a digit or a line
    # break (the shape gate relies on it; a test checks).
    b"Traceback (most", b'  File "', b"ailed", b"Killed", b"\xe5\xb7\xb2\xe6\x9d\x80\xe6\xad\xbb", b"Error: ",
    b"CUDA error: ", b"driver error: ", b"Python error: ",
    b"Bus error", b"cudaError", b"detected in the compilation", b"Error limit reached",
    b"already in use", b"atchdog ", b"terminate called", b"Segmentation fault", b"Aborted", b"is dead", b"died",
    b": obj=",
    b"exited", b"out of memory", b"OutOfMemoryError", b"NCCL error", b"ncclUnhandledCudaError", b"ncclSystemError",
    b"ncclInternalError", b"collective operation timeout", b"DistBackendError", b"device-side assert",
    b"illegal memory access", b"unspecified launch failure", b"Compilation terminated", b".cu(", b".cuh(",
    b"hit an exception", b"[Errno ", b"xit code", b"mem-fraction-static", b"didn't finish loading",
    b"SIGTERM received", b"Draining requests", b"Gracefully exiting", b"Shutting down",
    # a container runtime's partial record: held until its full record ends the line
    b" stdout P ", b" stderr P ",
)
# Phase markers, looked for only while their phase is still ahead.
_PHASE_ANCHORS = (
    ("loading_weights", (b"Load weight begin", b"checkpoint shards")),
    ("kv_cache", (b"Load weight end", b"Memory pool end", b"KV Cache is allocated")),
    ("cuda_graph", (b"cuda graph begin", b"Capturing batches")),
    ("warmup", (b"Uvicorn running", b"Started server process", b"Application startup")),
    ("ready", (b"fired up",)),
)
_ANCHORS_BY_PHASE = {}

# The shape gate (LogClassifier._gate): blocks of about _GATE_BLOCK bytes, used while at least _GATE_MIN
# bytes are left to scan; at most _GATE_KNOWN_BYTES of anchor-free shapes are remembered. A block whose new
# shapes are more than 1/_GATE_POOR of it (logs of unique lines: the gate does not pay) counts as poor;
# after _GATE_POOR_RUN poor blocks in a row the gate rests for _GATE_REST bytes.
_DIGITS = b"0123456789"
_GATE_BLOCK = 256 * 1024
_GATE_MIN = 32 * 1024
_GATE_KNOWN_BYTES = 2 * 1024 * 1024
_GATE_POOR = 4
_GATE_POOR_RUN = 4
_GATE_REST = 16 * 1024 * 1024


def _anchors(phase_index):
    found = _ANCHORS_BY_PHASE.get(phase_index)
    if found is None:
        extra = ()
        for phase, anchors in _PHASE_ANCHORS:
            if _PHASE_INDEX[phase] > phase_index:
                extra += anchors
        found = _ANCHORS_BY_PHASE[phase_index] = _CRASH_ANCHORS + extra
    return found


def _next_anchor(buf, pos, end, anchors, cache):
    """Smallest position >= pos of any anchor in buf[:end] (end if none). cache: anchor -> last answer
    (only valid for this end)."""
    best = end
    find = buf.find
    for a in anchors:
        p = cache.get(a, -1)
        if p < pos:
            if a[:1] == b"\n":  # anchored at a line start: the hit is the byte after the newline
                p = find(a, pos - 1 if pos else 0, end)
                p = end if p < 0 else p + 1
            else:
                p = find(a, pos, end)
                if p < 0:
                    p = end
            cache[a] = p
        if p < best:
            best = p
    return best


_CACHED_NONZERO = re.compile(rb"Prefill batch[.,][^\n\r]*?#cached-token: [1-9]")
_SHARDS_B = re.compile(rb"Loading (?:safetensors|pt) checkpoint shards:\s*\d+% Completed \| (\d+)/(\d+)")


_PHASE_MARKERS = [
    (re.compile(r"The server is fired up and ready to roll"), "ready"),
    (re.compile(r"Uvicorn running on|Started server process|Application startup complete"), "warmup"),
    (re.compile(r"Capture (?:draft )?(?:extend )?cuda graph begin|Capturing batches"), "cuda_graph"),
    (re.compile(r"Load weight end|Memory pool end|KV Cache is allocated"), "kv_cache"),
    (re.compile(r"Load weight begin|Loading (?:safetensors|pt) checkpoint shards"), "loading_weights"),
]
_SHARDS = re.compile(r"Loading (?:safetensors|pt) checkpoint shards:\s*\d+% Completed \| (\d+)/(\d+)")
_PREFILL = re.compile(r"Prefill batch[.,].*?#cached-token: (\d+)")

_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_FRAME = re.compile(r'^\s+File "([^"]*)", line \d+, in (\S+)')
_CHAIN = re.compile(r"^(?:During handling of the above exception|The above exception was the direct cause)")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Iteration))(?::\s?(.*))?$")

_BAD_CONFIG = re.compile(
    r"does not recognize this architecture|only supports sm\d+|unrecognized arguments|ambiguous option|"
    r"invalid choice|ModuleNotFoundError|ImportError|got multiple values for argument|"
    r"is not supported|not supported on|Unsupported|must be (?:one of|divisible)|"
    r"model type `|KeyError: '[\w.-]+'$|Cannot find model module|is not a registered model|Unrecognized model in"
)
_BAD_CONFIG_FRAMES = re.compile(r"^(?:prepare_server_args|from_cli_args|__post_init__|get_open_port|<module>|"
                                r"check_server_args|_handle_\w+|get_config|_check_\w+)$")
_LAUNCHER_FRAMES = re.compile(r"^(?:_run_module_as_main|_run_code|<module>)$")
_MAX_LINE = 64 * 1024
_FIRST_BATCHES = 8
_TAIL_BYTES = 64 * 1024
_MAX_BLOCK = 400
_HEAD = 256  # bytes of a followed file's start kept to see it rewritten (copytruncate)


def strip_prefix(line):
    """Return (body, has_sglang_prefix) for a raw log line, whatever wraps it."""
    body = _OUTER_PREFIX.sub("", line, count=1)
    m = _SGLANG_PREFIX.match(body)
    if m:
        return body[m.end():], True
    return body, False


class _Block(object):
    """One Python traceback as it appears in the log (possibly chained, possibly a fragment)."""

    __slots__ = ("start_line", "start_lineno", "headed", "prefixed", "scheduler_header", "lines",
                 "frames", "exception", "launcher", "scheduler_frame")

    def __init__(self, line, lineno, headed, prefixed=False, scheduler_header=False):
        self.start_line = line
        self.start_lineno = lineno
        self.headed = headed
        self.prefixed = prefixed
        self.scheduler_header = scheduler_header
        self.lines = [line]
        self.frames = []
        self.exception = None
        self.launcher = False
        self.scheduler_frame = None  # (line, lineno) of a run_scheduler_process frame


def _crash_hint(cls, exc_text):
    """The operator's hint for a crash of class cls, sharper where the exception names a known cause."""
    hint = HINTS[cls]
    if exc_text:
        if "'EAGLEWorkerV2' object has no attribute" in exc_text:
            return ("EAGLEWorkerV2 was only half constructed (its __init__ failed early and the error was "
                    "swallowed); apply the early-init patch (sglang_patch_enabled: true) so the attribute "
                    "exists, and look in the log for the original init failure")
        if "get_open_port" in exc_text or "'str' object cannot be interpreted as an integer" in exc_text:
            return ("a port variable is not a number; a Kubernetes Service named 'sglang' injects "
                    "SGLANG_PORT=tcp://...: rename the Service or unset SGLANG_PORT")
    return hint


class _LineScanner(object):
    """Bytes in: split what is fed into lines and hand each one that can matter to ``feed_line``; whole stretches
    that cannot change the verdict are skipped (the shape gate, the anchors) with only the counters kept.

    Part of :class:`LogClassifier`, whose ``__init__`` sets the state these methods share."""

    def feed(self, data, final=False):
        """Feed raw bytes (any chunking). Lines are processed once complete; ``final`` flushes
        an unterminated last line."""
        start = 0
        if data:
            self._tail_bytes = (self._tail_bytes + data[-_TAIL_BYTES:])[-_TAIL_BYTES:]
            if b"\x00" in data:
                data = data.replace(b"\x00", b"")
            if self._partial and len(data) > _TAIL_BYTES:
                # A big read: complete the held line with the read's first line and scan that alone, rather
                # than copy the whole read behind it.
                nl = data.find(b"\n")
                cr = data.find(b"\r", 0, nl) if nl >= 0 else data.find(b"\r")
                brk = cr if cr >= 0 else nl
                if brk >= 0:
                    brk += 2 if data[brk:brk + 2] == b"\r\n" else 1
                    head = self._partial + data[:brk]
                    self._partial = b""
                    self._scan(head, len(head))
                    start = brk
        buf = self._partial + data if self._partial else data
        self._partial = b""
        end = len(buf)
        last_nl = max(buf.rfind(b"\n", start), buf.rfind(b"\r", start))
        runaway = None
        if not final:
            complete_end = max(last_nl + 1, start)
            self._partial = buf[complete_end:]
            if len(self._partial) > _MAX_LINE:  # a runaway line: take it as it is
                runaway = complete_end
                complete_end = end
                self._partial = b""
        else:
            complete_end = end
        if complete_end <= start:
            return
        self._scan(buf, complete_end, start)
        if runaway is not None:
            # The rest of this line comes with the next read. If the line is data (an access line, an echo, a
            # client's error), so is its rest, also when the bulk scan skipped the line's head unread.
            body = strip_prefix(buf[runaway:runaway + 4096].decode("utf-8", "replace"))[0]
            if _ACCESS_HEAD.match(body) or body.startswith(_CLIENT_ERROR) or _ECHO.match(body):
                self._echo_last = True
            self._midline = True

    def _scan(self, buf, end, pos=0):
        cache = {}
        limit = None  # the end the cached anchor positions were searched to
        self._dirty = None
        gating = self._rest <= 0
        if not gating:
            self._rest -= end
        while pos < end:
            if self._block is None and self._pending_chain is None and self._echo is None and not self._cri:
                # Fast path: jump to the next line that can matter; account for the lines skipped.
                anchors = _anchors(_PHASE_INDEX[self.phase])
                if gating and end - pos >= _GATE_MIN and (self._dirty is None or pos >= self._dirty[1]):
                    pos = self._gate(buf, pos, end, anchors)
                    if pos >= end:
                        return
                    gating = self._rest <= 0
                dirty = self._dirty
                stop = end
                if dirty is not None and pos >= dirty[1]:
                    dirty = None
                if dirty is not None:
                    if dirty[3] is not anchors:  # the phase moved on: fewer anchors
                        dirty = self._dirty = (dirty[0], dirty[1], tuple(a for a in dirty[2] if a in anchors), anchors)
                    stop, anchors = dirty[1], dirty[2]  # only those anchors are in this block
                if stop != limit:
                    cache = {}
                    limit = stop
                hit = _next_anchor(buf, pos, stop, anchors, cache)
                start = stop if hit >= stop else max(
                    buf.rfind(b"\n", pos, hit), buf.rfind(b"\r", pos, hit), pos - 1) + 1
                if start > pos:
                    self._skip(buf, pos, start)
                    pos = start
                if hit >= stop:
                    if stop >= end:
                        return
                    continue  # the rest of the block holds no anchor: gate the next one
            # one line from pos
            nl = buf.find(b"\n", pos, end)
            cr = buf.find(b"\r", pos, end)
            if nl < 0 and cr < 0:
                stop = end
                brk = end
            else:
                if nl < 0 or (0 <= cr < nl):
                    stop = cr
                else:
                    stop = nl
                brk = stop + 1
                if buf[stop:stop + 1] == b"\r" and buf[brk:brk + 1] == b"\n":
                    brk += 1
            line = buf[pos:stop].decode("utf-8", "replace")
            self.feed_line(line)
            self._midline = brk == stop
            if b"\n" in buf[stop:brk]:
                self.lineno += 1
            pos = brk

    def _gate(self, buf, pos, end, anchors):
        """Skip whole blocks of lines that hold no anchor (pos: a line start, end: after a line break).
        Returns where the scan goes on: end, the start of a block that holds an anchor (self._dirty says
        which and where it ends), or the start of a line too long for a block."""
        known = self._known
        while end - pos >= _GATE_MIN:
            stop = buf.rfind(b"\n", pos, min(pos + _GATE_BLOCK, end)) + 1
            if stop <= pos:
                return pos  # one line longer than a block: the anchors' own search takes it
            shapes = buf[pos:stop].translate(None, _DIGITS).split(b"\n")
            if not known.issuperset(shapes):
                new = set(shapes)
                new -= known
                text = b"\n".join(new)
                found = tuple(a for a in anchors if a.lstrip(b"\n") in text)
                if found:
                    self._dirty = (pos, stop, found, anchors)
                    self._poor = 0
                    return pos
                if len(text) * _GATE_POOR > stop - pos:
                    self._poor += 1
                    if self._poor >= _GATE_POOR_RUN:
                        self._poor = 0
                        self._rest = _GATE_REST
                else:
                    self._poor = 0
                size = len(text) + 64 * len(new)
                if self._known_bytes + size > _GATE_KNOWN_BYTES:
                    known.clear()
                    self._known_bytes = 0
                if size <= _GATE_KNOWN_BYTES:
                    known |= new
                    self._known_bytes += size
            else:
                self._poor = 0
            self._skip(buf, pos, stop, len(shapes) - 1)
            pos = stop
            if self._rest > 0:
                break
        return pos

    def _skip(self, buf, start, end, newlines=None):
        """Lines between start and end cannot change the verdict: keep what the counters need."""
        self.lineno += buf.count(b"\n", start, end) if newlines is None else newlines
        if self.state == "crashed":
            return
        if not self.decode_batches and not self.prefill_cached and self.prefill_batches <= _FIRST_BATCHES:
            # Batch statistics matter only for the first few batches (first_request_crash).
            n = buf.count(b"Prefill batch", start, end)
            if n:
                self.prefill_batches += n
                if _CACHED_NONZERO.search(buf, start, end):
                    self.prefill_cached += 1
            if buf.find(b"Decode batch", start, end) >= 0:
                self.decode_batches += 1
        if _PHASE_INDEX[self.phase] < _PHASE_INDEX["cuda_graph"]:
            i = buf.rfind(b"checkpoint shards", start, end)
            if i >= 0:
                ls = max(buf.rfind(b"\n", start, i), buf.rfind(b"\r", start, i), start - 1) + 1
                m = _SHARDS_B.search(buf, ls, end)
                if m:
                    self.shards = (int(m.group(1)), int(m.group(2)))


class _TracebackTracker(object):
    """Tracebacks: gather a traceback's lines into a block (chained, headed or a fragment), decide whether it
    proves a crash, and refine the crash's class, exception and traceback from it.

    Part of :class:`LogClassifier`, whose ``__init__`` sets the state these methods share."""

    def _track_blocks(self, line, body, prefixed, lineno):
        """Hand the line to the traceback it opens, continues or ends."""
        if _TRACEBACK.match(body) or "Scheduler hit an exception" in body or "warmup error: Traceback" in body:
            self._open_block(line, body, prefixed, lineno)
            return
        if self._pending_chain is not None:
            if _CHAIN.match(body):
                self._pending_chain.lines.append(line)
                return
            self._pending_chain = None
        fm = _FRAME.match(body)
        if fm:
            self._add_frame(fm, line, lineno)
            return
        if self._block is not None:
            self._extend_block(self._block, line, body, prefixed, lineno)

    def _open_block(self, line, body, prefixed, lineno):
        """A traceback's header: a new block, or the next part of a chained exception."""
        blk = self._block
        if self._pending_chain is not None and not prefixed and _TRACEBACK.match(body):
            # continuation of a chained exception: keep the chain's first header
            chain = self._pending_chain
            self._pending_chain = None
            nb = _Block(line, lineno, headed=True)
            nb.start_line, nb.start_lineno = chain.start_line, chain.start_lineno
            nb.launcher = chain.launcher
            nb.frames = list(chain.frames)
            nb.lines = chain.lines + [line]
            self._block = nb
            return
        self._pending_chain = None
        if blk is not None:
            self._end_block(blk, unterminated=True)
        self._block = _Block(line, lineno, headed=True, prefixed=prefixed,
                             scheduler_header="Scheduler hit an exception" in body)

    def _add_frame(self, fm, line, lineno):
        """A ``File "...", line N, in func`` line (fm: its match): into the open block, or one of its own."""
        blk = self._block
        if blk is None:
            blk = self._block = _Block(line, lineno, headed=False)
        else:
            blk.lines.append(line)
        func = fm.group(2)
        blk.frames.append((fm.group(1), func))
        if _LAUNCHER_FRAMES.match(func) and ("runpy" in fm.group(1) or "launch_server" in fm.group(1)):
            blk.launcher = True
        if func == "run_scheduler_process" and blk.scheduler_frame is None:
            blk.scheduler_frame = (line, lineno)
            if not blk.headed:
                # A fragment: the scheduler's top-level handler only prints on a fatal error.
                self._decide(line, lineno, "python_exception", final=False)

    def _extend_block(self, blk, line, body, prefixed, lineno):
        """Any other line while a block is open: its body, its exception line (which ends it), or not its own."""
        if body[:1] in (" ", "\t") or body.startswith("^") or body.strip().startswith("^"):
            blk.lines.append(line)
            if len(blk.lines) > _MAX_BLOCK:
                self._end_block(blk, unterminated=True)
            return
        em = _EXCEPTION.match(body.strip())
        if em:
            blk.lines.append(line)
            blk.exception = (line, lineno, body.strip())
            self._block = None
            self._pending_chain = blk
            self._end_block(blk)
            return
        if prefixed:
            # another rank's ordinary log line in the middle: leave the block open
            return
        # Something else: a traceback body we do not understand (cut fragment). Keep it.
        blk.lines.append(line)
        if len(blk.lines) > _MAX_BLOCK:
            self._end_block(blk, unterminated=True)

    def _end_block(self, blk, unterminated=False):
        """A traceback ended (or was cut). Decide whether it proves a crash, and refine the class."""
        if blk is self._block:
            self._block = None
        exc_text = blk.exception[2] if blk.exception else ""
        exc_name = exc_text.split(":", 1)[0].rsplit(".", 1)[-1]
        if exc_name == "KeyboardInterrupt" or (exc_name == "SystemExit" and self.stopping is not None):
            # SIGINT (Ctrl-C, or a stop's SIGINT) raises KeyboardInterrupt wherever the process was: a stop
            self._stop(blk.exception[0], blk.exception[1])
            return
        fatal_line = None
        if blk.scheduler_header or blk.prefixed or "warmup error" in blk.start_line:
            fatal_line = (blk.start_line, blk.start_lineno)
        elif blk.headed and (blk.launcher or blk.scheduler_frame):
            fatal_line = (blk.start_line, blk.start_lineno)
        elif not blk.headed and blk.scheduler_frame:
            fatal_line = blk.scheduler_frame
        elif not blk.headed and blk.exception and not unterminated:
            fatal_line = (blk.exception[0], blk.exception[1])
        cls = self._classify_block(blk, exc_text)
        if (self.crash is not None and fatal_line is not None and blk.start_lineno > self.crash["lineno"]
                and not (blk.launcher and not blk.scheduler_frame and not blk.scheduler_header)
                and self._supersede()):
            pass  # a later, separate traceback after a crash a client could have written: it explains instead
        if self.crash is None:
            if fatal_line is None:
                return  # a traceback something recovered from (or a warning): not a crash
            self._decide(fatal_line[0], fatal_line[1], cls, final=False)
        if self.crash is not None and (blk.exception is not None or blk.frames):
            self._refine(blk, cls, exc_text)

    def _classify_block(self, blk, exc_text):
        text = "\n".join(blk.lines)
        funcs = [f for _path, f in blk.frames]
        files = [p for p, _func in blk.frames]
        if re.search(r"address already in use|\[Errno 98\]", text, re.I):
            return "port_in_use"
        if _KV_POOL.search(text):
            return "kv_pool_oom"
        if _BARRIER.search(text):
            return "load_barrier_timeout"
        if re.search(r"out of memory|OutOfMemoryError", text):
            return "cuda_oom"
        if re.search(r"CUDA (?:driver )?error: |device-side assert|illegal memory access|cudaError(?!Memory)\w+", exc_text):
            return "cuda_error"  # the exception names a CUDA fault, whatever called it (NCCL included)
        if re.search(r"NCCL error|\bnccl\w*Error|ncclCommInit|DistBackendError", text):
            return "nccl"
        if re.search(r"CUDA error|device-side assert|illegal memory access", text):
            return "cuda_error"
        if (re.search(r"CompilationError|ninja: build stopped|CalledProcessError: Command '\['ninja'", text)
                or any("triton/compiler" in p or "torch/_inductor" in p for p in files)):
            return "compile_error"  # a JIT build failed, also when it ran inside capture or warm-up
        if "warmup error" in blk.start_line or any(f in ("_wait_and_warmup", "_execute_server_warmup") for f in funcs):
            return "warmup_failed"
        if (any("cuda_graph_runner" in p for p in files) or "Capture cuda graph" in text
                or (self.phase == "cuda_graph" and "run_scheduler_process" in funcs)):
            return "cuda_graph_capture"
        # The scheduler's serving loop (event_loop_* shows in the frames or in the quoted source lines):
        # whatever failed there, the server had started.
        serving = "event_loop" in text or any(f in ("run_batch", "forward_batch_generation") for f in funcs)
        if not serving and (_BAD_CONFIG.search(exc_text) or any(_BAD_CONFIG_FRAMES.match(f) for f in funcs)):
            return "bad_config"
        if self._first_batches_only() and (serving or not funcs or self.phase in ("warmup", "ready")):
            return "first_request_crash"
        return "python_exception"

    def _first_batches_only(self):
        """Only the first batches ran (of the warm-up before ready, of clients after it): no decode batch
        was logged and no prefix-cache hit (a hit means earlier requests were served)."""
        return 0 < self.prefill_batches <= _FIRST_BATCHES and self.prefill_cached == 0 and self.decode_batches == 0

    def _refine(self, blk, cls, exc_text):
        crash = self.crash
        if crash.get("traceback") is None or (crash.get("exception") is None and blk.exception is not None):
            crash["exception"] = exc_text or None
            crash["traceback"] = [l for l in blk.lines if l.strip()]
            self._apply_cause(crash)
        if self.settled:
            return
        # child_sigquit is refined only by a scheduler's traceback, not by a launching script's.
        if crash["class"] == "child_sigquit" and not (blk.scheduler_header or blk.scheduler_frame):
            return
        if _RANK[crash["class"]] >= 1 and _RANK[cls] <= _RANK[crash["class"]]:
            return  # e.g. the launcher's RuntimeError after a segfault: the segfault is the cause
        crash["class"] = cls
        crash["hint"] = _crash_hint(cls, exc_text)
        self._apply_cause(crash)
        self.settled = True


class _CrashDecisions(object):
    """Decisions: an orderly stop, a crash decided by a line signature or a traceback, and a crash set aside
    (superseded after a raw request echo, or dismissed because the server outlived it).

    Part of :class:`LogClassifier`, whose ``__init__`` sets the state these methods share."""

    def _stop(self, line, lineno):
        if self.stopping is None:
            self.stopping = {"line": line, "lineno": lineno}

    def _on_signature(self, line, lineno, cls, final):
        if cls == "port_in_use" and self.state == "ready":
            return  # a client's bind error after ready is not ours
        if self.stopping is not None and cls in _STOP_CONSEQUENCES:
            return  # the teardown after a stop: children gone, the launcher's SIGQUIT, a shell's "Killed"
        if (self.crash is not None and final and cls not in ("child_sigquit", "killed") and self._block is None
                and lineno > self.crash["lineno"] and self.settled):
            self._supersede()  # a definite signature of its own after a crash a client could have written
        if self.crash is None:
            self._decide(line, lineno, cls, final)
        elif not self.settled and cls != self.crash["class"] and (
                final or _RANK[cls] > _RANK[self.crash["class"]]):
            # a more specific cause inside the same crash (e.g. CUDA OOM in the scheduler's traceback,
            # the NCCL timeout in a C++ abort's what() line)
            self.crash["class"] = cls
            self.crash["hint"] = HINTS[cls]
            self._apply_cause(self.crash)
            self.settled = bool(final)

    def _decide(self, line, lineno, cls, final):
        if self.crash is not None:
            return
        self.state = "crashed"
        self.settled = bool(final)
        self.crash = {
            "class": cls,
            "hint": HINTS[cls],
            "line": line,
            "lineno": lineno,
            "phase": self.phase,
            "at": self._clock(),
            "exception": None,
            "traceback": None,
            "cause": None,
        }
        self._apply_cause(self.crash)

    @staticmethod
    def _apply_cause(crash):
        """Name the crash's known cause where its own lines match the catalogue (CATALOGUE): its hint then replaces
        the class's."""
        found = crash_cause([crash.get("line"), crash.get("exception")] + list(crash.get("traceback") or ()))
        if found is not None:
            crash["cause"], crash["hint"] = found

    def crash_after_raw_echo(self, crash=None):
        """The line number of the first raw request echo at or before ``crash``'s deciding line (the current crash by
        default), or None: from that echo on, a client's prompt can have written any line, so no framing rule tells
        its lines from SGLang's and the crash's class is uncertain."""
        crash = crash if crash is not None else self.crash
        if crash is None or not self.raw_echoes or self.raw_echoes[0] > crash["lineno"]:
            return None
        return self.raw_echoes[0]

    def _supersede(self):
        """A later crash came after one that a raw echo's client could have written: set the earlier aside
        (``superseded``) so that the later one decides, and is explained. Only while no orderly stop is under
        way. Returns whether it did."""
        if self.crash is None or self.stopping is not None or self.crash_after_raw_echo() is None:
            return False
        self.superseded.append(self.crash)
        self.crash = None
        self.settled = False
        self.state = "ready" if self.ready is not None else "loading"
        return True

    def dismiss_crash(self):
        """Set the current crash aside (the server outlived it: evidence says it was not its death) and look for
        the next one; ``dismissed`` keeps what was set aside, first first."""
        if self.crash is None:
            return
        self.dismissed.append(self.crash)
        self.crash = None
        self.settled = False
        self.state = "ready" if self.ready is not None else "loading"


class LogClassifier(_LineScanner, _TracebackTracker, _CrashDecisions):
    """Decide ready / crashed / loading from SGLang log lines.

    Feed it bytes with :meth:`feed` (or whole lines with :meth:`feed_line`); read ``state``,
    ``phase``, ``phases``, ``shards``, ``crash`` and ``ready``. Call :meth:`finalize` when the
    log is complete (process gone, or a post-mortem read): it decides traceback fragments that
    never reached their last line.
    """

    def __init__(self, clock=time.time):
        self._clock = clock
        self.state = "loading"
        self.phase = "launching"
        self.phases = [{"phase": "launching", "at": clock(), "lineno": 0}]
        self.shards = None  # (done, total)
        self.crash = None
        self.dismissed = []  # crashes set aside by dismiss_crash()
        # Raw request echoes (see _ECHO_MULTI: older SGLang wrote the prompt raw, so from the line after it a client
        # can write any line shape, prefix included): the line numbers where one began. A crash at or after one may be
        # the client's text; a later crash then supersedes it (the latest crash before a death explains the death),
        # and the explanation of a death says its class is uncertain (class_uncertain()).
        self.raw_echoes = []
        self.superseded = []  # crashes set aside because a later one came after a raw echo (first first)
        self.ready = None
        self.settled = False  # crash class will not change any more
        self.lineno = 0  # count of "\n"-terminated lines seen (what `sed -n Np` shows)
        self.prefill_batches = 0
        self.prefill_cached = 0
        self.decode_batches = 0
        self.stopping = None  # {"line", "lineno"} of the first sign of an orderly stop (SIGTERM, SIGINT)
        self._child_exit = None  # (line, lineno, code): a child the launcher reported gone, not (yet) explained
        self._partial = b""
        self._block = None
        self._pending_chain = None  # a closed block that a chained traceback may continue
        self._tail_bytes = b""
        self._echo = None  # inside a multi-line request echo: the bytes it may still span
        self._echo_last = False  # the last line (piece) fed was echo data
        self.access_lines = 0  # uvicorn access lines seen (data: the client's request line)
        self.notices = 0  # warning/info lines that held back a signature word or a traceback
        self._midline = False  # the last piece fed ended without a line break (a runaway line)
        self._cri = {}  # CRI stream -> (first physical line, text so far) of a partial ("P") record
        # the shape gate (see _gate): line shapes proven anchor-free, their size, the block that holds an
        # anchor (start, end, anchors found), poor blocks in a row, bytes left to rest
        self._known = set()
        self._known_bytes = 0
        self._dirty = None
        self._poor = 0
        self._rest = 0

    # ---------------------------------------------------------------- lines in
    def feed_line(self, line):
        """Process one complete line (no line break)."""
        line = self._whole_line(line)
        if line is None:
            return
        lineno = self.lineno + 1
        body, prefixed = strip_prefix(line)
        if self._is_data(line, body, lineno):
            return

        if "rid=" in body:
            body = _RID.sub("rid=<client>", body)  # what a client chose for its request id decides nothing

        # An orderly stop, and children the launcher reports gone (see _CHILD_EXIT).
        self._track_stop(line, body, lineno)

        # Phases and progress (cheap, and only while not crashed).
        if self.state != "crashed":
            self._track_progress(body, line, lineno)

        # Line signatures first (a definite signature on a traceback's last line beats the block's
        # own header), but not on indented source lines quoted inside a traceback.
        text = body
        if body[:1] in (" ", "\t"):
            what = _WHAT.match(body)  # "  what():  <message>" of a C++ exception that aborted the process
            text = what.group(1) if what else None
        elif self._is_notice(line, body):
            self.notices += 1
            return
        if text:
            for look, cls, final in _LOOKS:
                if look(text):
                    self._on_signature(line, lineno, cls, final)
                    break

        # Traceback blocks.
        self._track_blocks(line, body, prefixed, lineno)

    def _whole_line(self, line):
        """The line to classify, or None where it is taken already: the rest of a runaway echo, a blank line, the
        partial record of a container runtime (joined to its full record, which is returned whole)."""
        if self._midline and self._echo_last:
            # the rest of a request echo too long for one read (see _MAX_LINE)
            if self._echo is not None:
                self._echo = None if _echo_ends(line) else self._echo - len(line)
            return None
        if not line.strip():
            if self._echo is not None:
                self._echo -= 1
                return None
            if self._block is not None and self._block.exception is None:
                self._block.lines.append(line)
            return None
        cri = _CRI.match(line)
        if cri is not None:
            # A container runtime splits long lines into partial records ("P") ended by a full one ("F").
            key = cri.group(1)
            held = self._cri.pop(key, None)
            if held is not None:
                line = held[0] + line[cri.end():]
            if cri.group(2) == "P":
                self._cri[key] = (line if held is None else line, None)
                return None
        return line

    def _is_data(self, line, body, lineno):
        """Whether the line is a client's data (a request echo, its text, an access line, a client's error):
        counted, never classified."""
        if self._echo is not None:
            if self._echo > 0:
                # a new physical line of an echoed request's text (a prompt with newlines), whatever it looks like
                self._echo = None if _echo_ends(line) else self._echo - len(line) - 1
                self._echo_last = True
                return True
            self._echo = None  # longer than any echo: it was cut, and this line is the server's again
        if _ECHO.match(body):
            # only a dataclass repr (GenerateReqInput(..., text='...', ...)) can run over several physical lines (older
            # SGLang wrote its text raw); "Receive OpenAI: obj={...}" and the JSON form are one line each
            if _ECHO_MULTI.match(body):
                self._echo = _echo_left(body)
                if len(self.raw_echoes) < 1000:
                    self.raw_echoes.append(lineno)
            else:
                self._echo = None
            self._echo_last = True
            return True
        self._echo_last = False
        if _ACCESS.match(body) or body.startswith(_CLIENT_ERROR):
            # data; the rest of a runaway line (see _MAX_LINE) is data too
            self.access_lines += 1
            self._echo_last = True
            return True
        return False

    def _track_stop(self, line, body, lineno):
        """An orderly stop (SIGTERM, SIGINT), and a child the launcher reports gone (see _CHILD_EXIT)."""
        if self.stopping is None and _STOP.search(body):
            self._stop(line, lineno)
        if "xit code" in body:
            ce = _CHILD_EXIT.search(body)
            if ce is not None:
                code = int(ce.group(2))
                if code in _STOP_CODES:
                    self._stop(line, lineno)
                elif self._child_exit is None and not (self.stopping is not None and code == -9):
                    self._child_exit = (line, lineno, code)

    def _is_notice(self, line, body):
        """A warning or info line (never a traceback's own exception line), or, where the line names no level,
        one outside a traceback that says it falls back or that something is deprecated."""
        level = line_level(line, body)
        if level == "notice":
            return not (self._block is not None and _EXCEPTION.match(body.strip()))
        return (level is None and self._block is None and _NOTICE_WORDS.search(body) is not None
                and not _EXCEPTION.match(body.strip()))

    def _track_progress(self, body, line, lineno):
        for rx, phase in _PHASE_MARKERS:
            if rx.search(body):
                if phase == "ready":
                    if self.ready is None:
                        self.ready = {"line": line, "lineno": lineno}
                        # "First request" now means the first client request: forget the warm-up's batches.
                        self.prefill_batches = self.prefill_cached = self.decode_batches = 0
                    if self.state == "loading":
                        self.state = "ready"
                self._advance(phase, lineno)
                break
        if "checkpoint shards" in body:
            m = _SHARDS.search(body)
            if m:
                self.shards = (int(m.group(1)), int(m.group(2)))
        elif "Prefill batch" in body:
            self.prefill_batches += 1
            m = _PREFILL.search(body)
            if m and int(m.group(1)) > 0:
                self.prefill_cached += 1
        elif "Decode batch" in body:
            self.decode_batches += 1

    def _advance(self, phase, lineno):
        if _PHASE_INDEX[phase] > _PHASE_INDEX[self.phase]:
            self.phase = phase
            self.phases.append({"phase": phase, "at": self._clock(), "lineno": lineno})

    def finalize(self):
        """The log is complete: decide what an open traceback fragment proves."""
        if self._partial:
            self.feed(b"", final=True)
        if self._block is not None:
            self._end_block(self._block, unterminated=True)
        self._pending_chain = None
        if self.crash is None and self._child_exit is not None:
            # The launcher reported a child gone (not by a stop) and nothing after it explained it (the log ends
            # there: SGLang's own SIGQUIT line normally follows and decides child_sigquit).
            line, lineno, _code = self._child_exit
            self._decide(line, lineno, "killed", final=False)
        if self.crash is not None and not self.settled:
            self.settled = True
        return self

    # ---------------------------------------------------------------- reading the verdict
    def tail(self, n=40):
        """The last n non-blank lines fed."""
        return tail_lines(self._tail_bytes, n)

    def summary(self):
        crash = self.crash or {}
        return {
            "state": self.state,
            "phase": self.phase,
            "crash_class": crash.get("class"),
            "hint": crash.get("hint"),
            "line": crash.get("line") if self.crash else (self.ready or {}).get("line"),
            "lineno": crash.get("lineno") if self.crash else (self.ready or {}).get("lineno"),
            "exception": crash.get("exception"),
            "cause": crash.get("cause"),
            "shards": list(self.shards) if self.shards else None,
            "stop": dict(self.stopping) if self.stopping else None,
        }


class LogFollower(object):
    """Read what was appended to a file since the last call, by byte offset.

    * never reads a byte twice;
    * truncation (size below our offset, as with ``copytruncate``) restarts at 0; so does a file
      truncated and rewritten past our offset between two reads: its first bytes (remembered, up to
      ``_HEAD`` of them) are no longer the ones we read, checked with one small ``pread`` per call;
    * replacement or rotation (a new inode at ``path``) drains the old file, then follows the new
      one from its start;
    * a file that does not exist yet is simply empty;
    * ``start_offset``: the first read starts at that byte (a watch of a server already running); a file
      shorter than it was truncated or replaced meanwhile: reading starts at 0, counted as a truncation;
    * ``path`` may be an already opened descriptor's ``/proc/self/fd/N``: the file is opened again through it
      (its own offset, the caller's untouched) and it names that inode for as long as the descriptor is open,
      so it never sees a rotation; truncation is seen as for any path.
    """

    def __init__(self, path, max_read=8 * 1024 * 1024, start_offset=0):
        self.path = path
        self.offset = 0
        self.start_offset = max(0, int(start_offset or 0))
        self.max_read = max_read
        self._fh = None
        self._ident = None
        self._head = b""  # the file's first bytes as we read them
        self.rotations = 0
        self.truncations = 0

    def _open(self):
        try:
            fh = open(self.path, "rb")
        except (IOError, OSError):
            return False
        st = os.fstat(fh.fileno())
        self._fh = fh
        self._ident = (st.st_dev, st.st_ino)
        self.offset = 0
        self._head = b""
        start, self.start_offset = self.start_offset, 0  # only the first file opened starts there
        if start:
            if st.st_size < start:
                self.truncations += 1
            else:
                self.offset = start
                self._head = os.pread(fh.fileno(), min(start, _HEAD), 0)
        return True

    def read(self):
        """Return the bytes appended since the last call (b"" if none)."""
        if self._fh is None and not self._open():
            return b""
        out = []
        try:
            st = os.stat(self.path)
            ident = (st.st_dev, st.st_ino)
        except OSError:
            ident = self._ident  # removed: drain what the open descriptor still has
        if ident != self._ident:
            while True:  # all of the old file, not just one read's worth
                data = self._drain()
                if not data:
                    break
                out.append(data)
            self._fh.close()
            self._fh = None
            self.rotations += 1
            if not self._open():
                return b"".join(out)
        else:
            size = os.fstat(self._fh.fileno()).st_size
            if size < self.offset or (self._head and size > self.offset
                                      and os.pread(self._fh.fileno(), len(self._head), 0) != self._head):
                self.truncations += 1
                self.offset = 0
                self._head = b""
        out.append(self._drain())
        return b"".join(out)

    def _drain(self):
        self._fh.seek(self.offset)
        data = self._fh.read(self.max_read)
        if self.offset < _HEAD and data:
            self._head = (self._head + data)[:_HEAD]
        self.offset += len(data)
        return data

    def close(self):
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def tail_lines(data, n):
    """The last n non-blank lines of raw log bytes (NULs dropped, carriage returns as line breaks)."""
    text = data.replace(b"\x00", b"").replace(b"\r", b"\n").decode("utf-8", "replace")
    return [line for line in text.split("\n") if line.strip()][-n:]


def classify_bytes(data, final=True):
    """Classify a whole log given as bytes; returns the finished :class:`LogClassifier`."""
    clf = LogClassifier()
    clf.feed(data, final=final)
    if final:
        clf.finalize()
    return clf


def classify_file(path, chunk_size=4 * 1024 * 1024, final=True):
    """Classify a log file by streaming it in chunks (constant memory)."""
    clf = LogClassifier()
    with open(path, "rb") as fh:
        while True:
            data = fh.read(chunk_size)
            if not data:
                break
            clf.feed(data)
            if clf.crash is not None and clf.settled:
                break
    if final:
        clf.finalize()
    return clf
