"""What an adversary on a serving host tries, and what must hold: client text in SGLang's own lines, runaway
access lines, echoes, a watch that a client's line must not end early, a blocking health request, a slow
nvidia-smi child of the leader, things planted in the service user's log dir, check-mode plans on a full disk,
post-mortem prefixes. Each docstring says the attack; the assertion says what holds.

Unit tests: fake world (module_harness), no processes, no sleeps."""
from __future__ import annotations

import json
import os
import sys
import threading

import pytest

from ansible.module_utils import sglang_proc
from ansible.module_utils.sglang_log import LogClassifier

from ansible.module_utils import sglang_plan
import wait_for_model as wfm

from module_harness import (  # noqa: F401 - fixtures
    SCHED_CRASH, later, module_exits, record_self_as_server, run, serve, stops, world,
)

READY = "[2026-12-02 10:00:00] The server is fired up and ready to roll!\n"
# SGLang 0.5.23 schedule_batch.Req.set_finish_with_abort / scheduler._reject_sampling_mask_request:
#     logger.error(f"{error_msg}, {self.rid=}")
# ``rid`` is a request field: any client with the API key chooses it (a too-long input is enough to get here).
CLIENT_RID_LINE = ("[2026-12-02 10:00:01 TP0] Input length (9000 tokens) exceeds the maximum allowed length (8192 "
                   "tokens). Use a shorter input or enable --allow-auto-truncate., self.rid='torch.OutOfMemoryError: "
                   "CUDA out of memory. Tried to allocate 2.00 GiB'\n")
# SGLang http_server.generate_request: ``logger.error(f"[http_server] Error: {e}")`` where ``e`` is a ValueError
# whose text holds client input (tokenizer_manager: "Duplicate request ID detected: {rid}", the LoRA adapter names).
CLIENT_HTTP_ERROR_LINE = ("[2026-12-02 10:00:01] [http_server] Error: Duplicate request ID detected: "
                          "RuntimeError: CUDA error: an illegal memory access was encountered\n")


def _classify(text):
    c = LogClassifier(clock=lambda: 0.0)
    c.feed(text.encode())
    c.finalize()
    return c.crash


# ------------------------------------------------------------------ classifier: client text in SGLang's own lines
@pytest.mark.parametrize("line", [CLIENT_RID_LINE, CLIENT_HTTP_ERROR_LINE], ids=["rid_repr", "http_server_error"])
def test_client_rid_in_sglang_error_line_is_data(line):
    """SGLang logs client-chosen request ids (and ValueError texts built from them) on its own ERROR lines, in
    SGLang's level-less format. Such a line is not an access line or an echo, so the signature words in the
    client's rid decide a crash class (cuda_oom / cuda_error) and a deciding line."""
    crash = _classify(READY + line)
    assert crash is None, crash


# ------------------------------------------------------------------ the forged line becomes a real crash's explanation
def _append(path, text):
    def fn():
        with open(path, "a") as fh:
            fh.write(text)
    return fn


def test_real_crash_reported_with_client_forged_deciding_line(world, stops, module_exits):  # noqa: F811
    """A client plants ``rid='torch.OutOfMemoryError: CUDA out of memory'``; some seconds later the scheduler really
    dies of an NCCL error and the leader exits. The failure is found by process evidence (good), but the report
    names the client's line as the deciding line and the class as cuda_oom (the classifier keeps the first,
    higher-ranked crash), so the operator is sent after a memory problem that never happened."""
    serve(world)
    log = os.path.join(world.log_dir, "sglang.log")
    later(world, 1.3, lambda: setattr(world, "health", lambda t: None))  # busy from 1.3 s: no 200 after the line
    later(world, 1.4, _append(log, CLIENT_RID_LINE))
    later(world, 1.5, _append(log, SCHED_CRASH))

    def die():
        world.rc = 1
    later(world, 1.6, die)
    status, r = run(world, state="watched", watch_time=10, log_offset=-1)
    assert status == "failed"
    assert r["crash_class"] == "nccl", (r["crash_class"], r.get("deciding_line"))
    assert "Scheduler hit an exception" in r["deciding_line"]


def test_client_line_ends_the_watch_early_and_hides_a_later_crash(world, stops, module_exits):  # noqa: F811
    """decide(): with a crash line in the log, ``health.since >= crash.since`` returns "ready" at once, in a watch
    too, before the watch window is over. A client line (its rid) at 0.5 s therefore ends a 10 s watch at ~0.75 s
    as "healthy", and the scheduler that dies at 3 s (what the smoke watch is there to catch) is never seen."""
    serve(world)
    log = os.path.join(world.log_dir, "sglang.log")
    t0 = world.now
    later(world, 3.0, lambda: setattr(world, "health", lambda t: None))
    later(world, 0.5, _append(log, CLIENT_RID_LINE))
    later(world, 3.0, _append(log, SCHED_CRASH))

    def die():
        world.rc = 1
    later(world, 3.05, die)
    status, r = run(world, state="watched", watch_time=10, log_offset=-1)
    assert world.now - t0 >= 3.0, "watch of 10 s ended after %.2f s: %s" % (world.now - t0, r["msg"])
    assert status == "failed" and r["crash_class"] == "nccl"


def test_client_stop_words_silence_a_later_real_crash():
    """The stop detection (_STOP) runs on every line that is not an access line or an echo, before the notice
    check: SGLang's level-less ERROR line with a client's rid ``'SIGTERM received. signum=15'`` marks the log as
    "stopping" for good. When the scheduler is later OOM-killed (exit code -9, launcher's SIGQUIT), that teardown
    "decides nothing": the real crash gets no class (the module then reports a bare exit/killed)."""
    rid = ("[2026-12-02 10:00:01 TP0] Input length (9000 tokens) exceeds the maximum allowed length (8192 tokens). "
           "Use a shorter input or enable --allow-auto-truncate., self.rid='SIGTERM received. signum=15'\n")
    real = ("[2026-12-02 10:00:05] Subprocess scheduler_0 (pid=4101) crashed with exit code -9\n"
            "[2026-12-02 10:00:05] Received sigquit from a child process. It usually means the child failed.\n")
    assert _classify(READY + real)["class"] == "child_sigquit"  # without the client's line
    crash = _classify(READY + rid + real)
    assert crash is not None and crash["class"] == "child_sigquit", crash


def test_access_line_over_64k_split_between_reads_is_still_data():
    """uvicorn logs the raw query string (with httptools there is no cap on the request line; no API key needed,
    a 401/404 is logged too). A line over _MAX_LINE (64 KiB) that a read catches half-written is fed as a
    "runaway line", and the rest of it, read next, is taken as a line of its own with no access prefix: its
    client-chosen words decide a class. (One read of the whole line is fine.)"""
    q = b"a=" + b"x" * (70 * 1024) + b"&b=torch.OutOfMemoryError:ncclSystemError"
    line = b'[2026-12-02 10:00:01] INFO:     127.0.0.1:50420 - "GET /v1/models?' + q + b' HTTP/1.1" 401 Unauthorized\n'
    c = LogClassifier(clock=lambda: 0.0)
    c.feed(READY.encode())
    c.feed(line[:66 * 1024])  # what a read saw while uvicorn's write was under way
    c.feed(line[66 * 1024:])
    c.finalize()
    assert c.crash is None, (c.crash["class"], c.crash["line"][-90:])


# ------------------------------------------------------------------ launch preconditions in the service user's log_dir
@pytest.mark.parametrize("planted", ["sglang.log.tmp", "sglang.log"])
def test_planted_directory_in_log_dir_fails_after_the_old_server_was_stopped(world, stops, module_exits, planted):  # noqa: F811
    """The role's log_dir (/var/log/sglang) belongs to the service user (sglang_install: owner sglang, 0750), so
    that user may put anything there. launch() points ``<name>.log`` at the new attempt through
    ``<name>.log.tmp`` (unlink + symlink + rename) only after start() has stopped the old server: a directory
    planted at either name makes the launch raise after the stop (IsADirectoryError / rename onto a directory).
    The old server is gone and nothing was launched: a precondition that was not proven before the stop."""
    record_self_as_server(world, log_text=READY)
    os.mkdir(os.path.join(world.log_dir, planted))
    os.mkdir(os.path.join(world.log_dir, planted, "x"))  # not empty: rename() onto it fails too
    try:
        status, r = run(world)
    except Exception as e:  # noqa: BLE001 - an uncaught error is the finding too
        status, r = "raised", {"msg": repr(e)}
    assert stops == [] or world.spawned, "old server stopped, nothing launched: %s %s" % (status, r.get("msg"))


# ------------------------------------------------------------------ harmless children
def test_slow_nvidia_smi_of_the_leader_is_not_a_dead_worker(world, stops, module_exits):  # noqa: F811
    """SGLang's leader runs ``nvidia-smi --query-gpu=memory.total`` itself while it builds ServerArgs
    (arg_groups/memory_hook.py -> utils/common.get_nvgpu_memory_capacity, subprocess.run). On an 8-GPU host
    without the persistence daemon nvidia-smi often takes several seconds. A non-worker child that lived past
    child_grace (2 s) and then exits is taken as a dead long-lived child: ``child_died``, and the server that
    was starting normally is stopped. A child that exits with status 0 (reaped by its parent) is no crash."""
    world.children = {4100: 111}
    world.cmdlines = {4100: ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]}
    world.write(0.1, "[2026-12-02 10:00:00] server_args=ServerArgs(model_path='/models/x')\n")
    world.at(2.6, lambda: world.children.pop(4100))  # nvidia-smi done: 2.5 s on a cold 8-GPU host
    world.write(5.0, "[2026-12-02 10:00:05 TP0] Load weight begin. avail mem=78.00 GB\n" + READY)
    world.health = lambda t: 200 if t is not None and t >= 5.0 else None
    status, r = run(world)
    assert status == "ok", (r.get("crash_class"), r.get("evidence"))
    assert stops == [] and world.killed == []


# ------------------------------------------------------------------ latency: a health request blocks the watchers
SPAWN_WORKER = ["/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
                "--multiprocessing-fork"]


def _sglang_health_generate(world, dies_at):
    """SGLang's /health_generate as its source has it (http_server.health_generate): it sleeps 1 s before it first
    looks, answers 200 once the detokenizer answered, else 503 after HEALTH_CHECK_TIMEOUT (20 s). The module's
    request blocks meanwhile (http_status is synchronous); the fake clock moves by what the request took."""
    def http(url, headers, timeout):
        start = world.now - world.t0
        if start + 1.0 < dies_at:
            world.now += 1.0
            world._fire()
            return 200
        world.now += timeout  # the scheduler is gone: no answer within the module's timeout
        world._fire()
        return None
    return http


def test_dead_scheduler_reported_only_after_the_health_request_times_out(world, stops, module_exits):  # noqa: F811
    """Watching, each health request may take ``health_timeout`` (10 s by default). With real SGLang every
    /health_generate takes >= 1 s (it sleeps 1 s before looking), so the watch's own request is in flight most of
    the time; when the scheduler dies (OOM killer: no log line), the request in flight hangs until its timeout. The
    supervisor's verdict (the worker gone from /proc) must still be reported at once, not ~10 s later."""
    world.children = {4100: 111}
    world.cmdlines = {4100: SPAWN_WORKER}
    serve(world)
    died = world.now + 2.0
    later(world, 2.0, lambda: world.children.pop(4100))
    # The watch's health request runs in its own thread and never answers (the dying server holds it): the loop
    # goes on reading the supervisor's status.
    release = threading.Event()

    def hanging_health(url, headers, timeout):
        release.wait(30)
        return None
    try:
        status, r = run(world, state="watched", watch_time=30, log_offset=-1,
                        inject={"http": hanging_health, "background_health": True})
    finally:
        release.set()
    assert status == "failed" and r["crash_class"] == "child_died"
    # the supervisor looks every 0.5 s while serving and gives the log settle_time (0.3 s) to say why
    assert world.now - died <= 0.5 + 0.3 + 0.2, "dead worker reported %.2f s after it died" % (world.now - died)


def test_openai_echo_holding_text_quote_swallows_a_later_real_crash():
    """--log-requests: SGLang 0.5.23 request_logger.log_openai_received_request writes the raw OpenAI payload as a
    dict repr on one line ("Receive OpenAI: obj={'messages': [...], ...}"). A prompt that holds ``text='`` makes
    _echo_left() look for the end of a GenerateReqInput text field: a dict repr has no ``', name=`` tail, so the
    one-line echo is taken as unclosed and the next 256 KiB of the server's own log are read as prompt data. A real
    scheduler crash there gets no class and no deciding line (the report says only that a process died)."""
    echo = ("[2026-12-02 10:00:01] Receive OpenAI: obj={'messages': [{'role': 'user', 'content': \"say text='hi'\"}], "
            "'model': 'default', 'max_tokens': 8}\n")
    sched = SCHED_CRASH + "[2026-12-02 10:00:05] Received sigquit from a child process. It usually means the child failed.\n"
    assert _classify(READY + sched)["class"] == "nccl"
    crash = _classify(READY + echo + sched)
    assert crash is not None and crash["class"] == "nccl", crash


# ------------------------------------------------------------------ post-mortem formats (bin/sglang-logcheck)
def test_cri_partial_access_record_without_anchor_is_skipped_by_the_prefilter():
    """A container runtime splits a log line over 16 KiB into partial ("P") records; uvicorn's access line of a
    ~16 KiB request target (h11 accepts it, no key needed) is one. feed() skips every line without an anchor
    before feed_line() sees it, so a P record with no anchor is never held, and the F record that ends it (the
    client's tail, "torch.OutOfMemoryError:...") is read alone, as a crash. feed_line() line by line gets it right."""
    p = ("2026-12-02T10:00:01.100000000Z stdout P [2026-12-02 10:00:01] INFO:     127.0.0.1:50420 - \"GET /?a="
         + "x" * 16300 + "\n")
    f = "2026-12-02T10:00:01.100000000Z stdout F torch.OutOfMemoryError:x HTTP/1.1\" 401 Unauthorized\n"
    crash = _classify(READY + p + f)
    assert crash is None, (crash["class"], crash["line"][:80])


def test_compose_padded_service_prefix_access_line_is_data():
    """``docker compose logs`` pads service names ("sglang-1  | "); _OUTER_PREFIX strips "\\S+ \\| " (one space)
    only, so a padded access line is not recognised as one and the client's query string decides a class."""
    line = "sglang-1  | [2026-12-02 10:00:01] INFO:     127.0.0.1:1 - \"GET /?x=OutOfMemoryError: HTTP/1.1\" 404 Not Found\n"
    crash = _classify(READY + line)
    assert crash is None, crash["class"]


# ------------------------------------------------------------------ the role's plan proves less than the launch checks
def test_check_mode_plan_with_prove_launch_skips_the_free_space_check(world, stops, module_exits):  # noqa: F811
    """roles/sglang_server/tasks/service.yml: the plan (check mode, prove_launch: true) decides whether the next task
    stops our old server (state=stopped) before the launch. validate() checks min_free_space_mib only outside check
    mode (and the plan task does not pass the role's sglang_server_min_free_disk_mib anyway), so on a full disk the
    plan says "would restart", the old server is stopped, and only then does the launch refuse with "Nothing was
    stopped or launched" - after the role stopped it."""
    record_self_as_server(world, log_text=READY)
    status, r = run(world, check_mode=True, prove_launch=True, min_free_space_mib=1 << 30)
    assert status == "failed" and "min_free_space_mib" in r["msg"], (status, r.get("msg"))
    assert stops == []


def test_a_watched_leader_whose_pid_was_reused_is_gone_not_alive(world, stops, module_exits):  # noqa: F811
    """A server whose supervisor was put back (``--adopt``: it follows the leader by PID and start time, no child
    handle of its own). During a watch the leader dies and another process takes its PID: the start time differs,
    so the leader is gone (evidence), and nothing is signalled by the module (stop_tree checks identity itself)."""
    argv = [sys.executable, "-m", "sglang.launch_server", "--config", "/etc/sglang.yaml"]
    state = record_self_as_server(world, log_text=READY, watcher={"pid": 4000000, "start_time": 1, "cmdline": ["x"]},
                                  fingerprint=sglang_plan.fingerprint_of(sglang_plan.fingerprint_parts(argv, {}, [], {}, None)),
                                  launcher="detached")
    world.health = lambda t: 200
    sglang_proc.write_files(world.log_dir, (("sglang.watcher.json", json.dumps({
        "launch": "l1", "argv": argv, "env": {}, "log_dir": world.log_dir, "health_url": "http://127.0.0.1:1/h",
        "headers": {}, "secrets": [], "settings": {"health_interval": 0.25, "health_timeout": 10, "unhealthy_after": 3,
                                                   "child_grace": 2.0, "settle_time": 0.3, "stall_timeout": 0,
                                                   "poll_interval": 0.1}})),), mode=0o600)
    status, r = run(world, argv=argv)
    assert status == "ok" and r["supervisor"] == "restored", r
    world.t0 = world.now
    world.at(1.0, lambda: world.start_times.update({state["pid"]: state["start_time"] + 12345}))
    status, r = run(world, state="watched", watch_time=5, log_offset=-1)
    assert status == "failed" and r["evidence"].startswith("the server's leader process exited"), r.get("msg")
    assert 1.0 <= world.now - world.t0 <= 2.0
