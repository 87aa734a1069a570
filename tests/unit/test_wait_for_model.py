"""wait_for_model's wait loop, driven with a fake clock, fake launcher, fake HTTP and fake /proc.

No test spawns a process or sleeps: time only moves when the module calls its injected sleep(). Where a
test needs a live server that is "ours", it records this test process (``record_self_as_server``) and
replaces stop_tree with a recorder (``stops``). Real process trees: tests/integration."""
from __future__ import annotations

import json
import os
import sys

import pytest

from ansible.module_utils import sglang_proc
from ansible.module_utils.common.warnings import get_warning_messages

from ansible.module_utils import sglang_plan
import wait_for_model as wfm
from module_harness import (  # noqa: F401 - fixtures
    SCHED_CRASH, append, later, module_exits, record_self_as_server, run, serve, stops, world,
)

pytestmark = pytest.mark.usefixtures("module_exits")
UNUSED_PID = 4000000  # above any pid_max: never a live process
SPAWN_WORKER = ["/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)",
                "--multiprocessing-fork"]


def test_healthy_at_once(world):
    world.health = lambda t: 200
    status, r = run(world)
    assert status == "ok" and r["changed"] is True
    assert r["attempt"] == 1 and r["log_path"].endswith("sglang_r1.log")
    assert os.readlink(os.path.join(world.log_dir, "sglang.log")) == "sglang_r1.log"
    assert r["elapsed"] < 0.5
    state = json.load(open(os.path.join(world.log_dir, "sglang.json")))
    assert state["fingerprint"] == r["fingerprint"] and state["attempt"] == 1


def test_becomes_healthy_with_phase_timeline(world):
    world.write(1, "[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n")
    world.write(5, "Loading safetensors checkpoint shards:  50% Completed | 32/64 [01:00<01:00,  1.00it/s]\r")
    world.write(9, "[2026-12-02 10:00:09 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=10 GB\n")
    world.write(12, "[2026-12-02 10:00:12 TP0] Capture cuda graph begin. This can take up to several minutes.\n")
    world.write(20, "[2026-12-02 10:00:20] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n")
    world.health = lambda t: 200 if t >= 25 else (503 if t >= 20 else None)
    status, r = run(world)
    assert status == "ok"
    assert [p["phase"] for p in r["phases"]] == ["launching", "loading_weights", "kv_cache", "cuda_graph", "warmup"]
    assert 25 <= r["elapsed"] < 25.5
    assert r["phases"][2]["elapsed"] == pytest.approx(9, abs=0.2)
    assert r["shards"] == [32, 64]


def test_a_crash_is_reported_as_soon_as_a_worker_dies_with_the_logs_class_and_traceback(world):
    world.children = {4100: 111}
    world.cmdlines = {4100: SPAWN_WORKER}
    world.write(3, "[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n")
    world.write(30, SCHED_CRASH)
    world.at(30.05, lambda: world.children.pop(4100))  # the scheduler exits after its traceback
    world.health = lambda t: None
    status, r = run(world)
    assert status == "failed"
    assert r["crash_class"] == "nccl"
    assert r["deciding_line"].endswith("Scheduler hit an exception: Traceback (most recent call last):")
    assert r["crash_exception"].startswith("RuntimeError: NCCL error")
    assert 30.05 <= r["elapsed"] <= 30.3  # one poll after the evidence
    assert r["msg"].startswith("server crashed: nccl")
    assert r["evidence"] == "worker PID 4100 of the server died"
    assert any("NCCL error" in l for l in r["log_tail"])
    assert r["phase"] == "loading_weights"


def _held_after(world, t_crash):
    """A health URL that answers 503 at once while loading and, once the crash line is written, holds every
    request until its timeout without an answer (a server whose scheduler died holds its /health_generate)."""
    def http(url, headers, timeout):
        world.http_calls += 1
        if world.t0 is not None and world.now - world.t0 >= t_crash:
            world.sleep(timeout)
            return None
        return 503
    return http


def test_a_start_whose_health_request_the_crashed_server_holds_fails_within_the_hang_bound(world):
    # SGLang 0.5.17 keeps a crashed scheduler alive 10 s and more (sleep, py-spy, waiting for CUDA coredumps): the
    # crash line explains, our own request that the server holds is the evidence, long before the processes end.
    world.children = {4100: 111}
    world.cmdlines = {4100: SPAWN_WORKER}
    world.write(30, SCHED_CRASH)
    world.at(45, lambda: world.children.pop(4100))  # SGLang's own teardown, much later
    world.http = _held_after(world, 30)  # the supervisor's and the module's health requests
    status, r = run(world)
    assert status == "failed", r
    assert r["crash_class"] == "nccl" and r["crash_exception"].startswith("RuntimeError: NCCL error")
    assert 30 + 1.5 <= r["elapsed"] <= 30 + 1.5 + 0.6, r["elapsed"]  # HANG_BOUND after the line, within a poll
    assert r["evidence"].startswith("our health request got no answer for 1.5 s after the crash line")


def test_a_crash_line_after_a_raw_request_echo_never_arms_the_hang_rule(world):
    # Older SGLang echoes a request's text raw (--log-requests): a client can write a crash-shaped line, so that line
    # and a slow health answer alone never fail a start. The processes and the clock still decide.
    world.write(30, "[2026-12-03 09:24:18] Receive: obj=GenerateReqInput(rid='1', text='hi', input_ids=None, "
                    "sampling_params={})\n" + SCHED_CRASH)
    world.http = _held_after(world, 30)
    status, r = run(world, timeout=60, stall_timeout=0)
    assert status == "failed" and r["crash_class"] == "timeout", r


def test_a_crash_line_with_health_answering_503_is_no_hang(world):
    # The server answers (503 while loading): it is alive and not holding requests; the line alone never acts.
    world.write(30, SCHED_CRASH)
    world.health = lambda t: 503
    status, r = run(world, timeout=60, stall_timeout=0)
    assert status == "failed" and r["crash_class"] == "timeout", r


def test_a_held_request_without_a_crash_line_is_no_evidence(world):
    world.write(1, "[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n")
    world.http = _held_after(world, 5)
    status, r = run(world, timeout=60, stall_timeout=0)
    assert status == "failed" and r["crash_class"] == "timeout", r


def test_a_crash_line_alone_decides_nothing_while_the_processes_live(world):
    # The same lines, but every process lives on and the server comes up: the line explains, it never acts.
    world.children = {4100: 111}
    world.cmdlines = {4100: SPAWN_WORKER}
    world.write(30, SCHED_CRASH)
    world.health = lambda t: 200 if t >= 100 else None
    status, r = run(world)
    assert status == "ok", r
    assert 100 <= r["elapsed"] < 100.5
    assert r["log_crash"]["class"] == "nccl" and r["log_crash"]["acted_on"] is False
    assert "nothing was stopped" in r["msg"] and world.killed == []


def test_a_crash_line_with_live_processes_that_never_answer_ends_as_the_clock_says(world):
    world.children = {4100: 111}
    world.cmdlines = {4100: SPAWN_WORKER}
    world.write(30, SCHED_CRASH)
    world.health = lambda t: None
    status, r = run(world, stall_timeout=120, timeout=600)
    assert status == "failed" and r["crash_class"] == "stalled"
    assert 150 <= r["elapsed"] <= 151  # the stall clock (from the last output), not the crash line, decided
    assert r["evidence"] == "no log output and no HTTP answer for 120 s"
    assert r["log_crash"]["class"] == "nccl" and r["log_crash"]["acted_on"] is True
    assert "the log shows nccl at line 1" in r["msg"]


def test_parent_exit_without_crash_line(world):
    world.write(2, "[2026-12-02 10:00:00] server_args=ServerArgs(model_path='/m')\n")
    world.at(10, lambda: setattr(world, "rc", -9))
    status, r = run(world)
    assert status == "failed" and r["crash_class"] == "killed" and r["rc"] == -9
    assert 10 <= r["elapsed"] <= 10.2


def test_parent_exit_with_bare_traceback_is_classified_from_log(world):
    world.write(1, "Traceback (most recent call last):\n"
                   '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main\n'
                   "    return _run_code(code, main_globals, None,\n"
                   "ModuleNotFoundError: No module named 'sgl_kernel'\n")
    world.at(1.05, lambda: setattr(world, "rc", 1))
    status, r = run(world)
    assert status == "failed" and r["crash_class"] == "bad_config"
    assert r["deciding_line"] == "Traceback (most recent call last):"


def test_child_death_while_parent_lives(world):
    world.children = {4100: 111, 4101: 222}  # Python children that are not multiprocessing workers by their cmdline
    world.cmdlines = {4100: ["/usr/bin/python3", "-m", "sglang.srt.managers.detokenizer"],
                      4101: ["/usr/bin/python3", "-m", "sglang.srt.managers.scheduler"]}
    world.write(1, "[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n")
    world.at(40, lambda: world.children.pop(4100))
    status, r = run(world)
    assert status == "failed" and r["crash_class"] == "child_died"
    assert r["dead_child_pid"] == 4100
    assert 40 <= r["elapsed"] <= 40.7  # detection plus the settle time for the log to explain


def test_short_lived_helper_child_is_not_a_crash(world):
    world.children = {4100: 111}
    world.at(5, lambda: world.children.update({4200: 999}))  # nvidia-smi, a compiler...
    world.at(5.5, lambda: world.children.pop(4200))
    world.health = lambda t: 200 if t >= 8 else None
    status, r = run(world)
    assert status == "ok"


def test_stall_when_no_output_and_no_http_answer(world):
    world.write(1, "[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n")
    status, r = run(world, stall_timeout=60)
    assert status == "failed" and r["crash_class"] == "stalled"
    assert 61 <= r["elapsed"] <= 61.5
    assert "loading_weights" in r["msg"]


def test_http_answers_keep_a_silent_server_from_stalling(world):
    world.health = lambda t: 503  # alive, answering, not ready (CUDA-graph capture is silent)
    status, r = run(world, stall_timeout=30, timeout=100)
    assert status == "failed" and r["crash_class"] == "timeout"
    assert r["msg"].startswith("timed out after 100 s in phase 'launching'")


def test_timeout(world):
    world.health = lambda t: None
    status, r = run(world, stall_timeout=0, timeout=50)
    assert status == "failed" and r["crash_class"] == "timeout"
    assert 50 <= r["elapsed"] <= 50.3


def test_check_mode_spawns_nothing(world):
    status, r = run(world, check_mode=True)
    assert status == "ok" and r["changed"] is True
    assert world.spawned == []
    assert not os.path.exists(os.path.join(world.log_dir, "sglang.json"))
    assert os.listdir(world.log_dir) == []


SERVER_ARGV = [sys.executable, "-m", "sglang.launch_server", "--config", "/etc/sglang.yaml"]


def fingerprint_of_argv(argv):
    parts = sglang_plan.fingerprint_parts(argv, {}, [], {}, None)
    return sglang_plan.fingerprint_of(parts)


def test_already_healthy_same_fingerprint_touches_nothing(world, stops):
    state = record_self_as_server(world, fingerprint=fingerprint_of_argv(SERVER_ARGV))
    world.health = lambda t: 200
    status, r = run(world, argv=SERVER_ARGV)
    assert status == "ok" and r["changed"] is False and r["restart_reason"] is None
    assert r["pid"] == state["pid"]
    assert world.spawned == [] and world.http_calls == 1 and stops == []


def test_fingerprint_changed_restarts_and_stops_the_old_tree(world, stops):
    state = record_self_as_server(world, fingerprint=fingerprint_of_argv(SERVER_ARGV),
                                  fingerprint_parts=sglang_plan.fingerprint_parts(SERVER_ARGV, {}, [], {}, None))
    world.health = lambda t: 200
    status, r = run(world, argv=SERVER_ARGV + ["--changed"], stop_timeout=5)
    assert status == "ok" and r["changed"] is True
    assert r["restart_reason"] == "fingerprint changed: argv"
    assert stops == [state["pid"]] and r["stopped"]["signalled"] == [state["pid"]]
    assert r["attempt"] == 2 and len(world.spawned) == 1


def test_bare_pidfile_is_not_taken_as_ours(world, stops):
    with open(os.path.join(world.log_dir, "sglang.pid"), "w") as fh:
        fh.write("%d\n" % os.getpid())
    status, r = run(world, state="stopped")
    assert status == "failed" and "cannot prove" in r["msg"]
    assert stops == []


def test_stopped_stops_our_recorded_server_and_forgets_it(world, stops):
    state = record_self_as_server(world)
    status, r = run(world, state="stopped", stop_timeout=5)
    assert status == "ok" and r["changed"] is True and r["pid"] == state["pid"]
    assert stops == [state["pid"]]
    assert not os.path.exists(os.path.join(world.log_dir, "sglang.json"))
    status, r = run(world, state="stopped")
    assert status == "ok" and r["changed"] is False and stops == [state["pid"]]


@pytest.mark.parametrize("args, needle", [
    ({"argv": []}, "argv is empty"),
    ({"health_url": "ftp://x/health"}, "health_url"),
    ({"timeout": 0}, "timeout must be > 0"),
    ({"log_dir": "/nonexistent/dir"}, "log_dir /nonexistent/dir does not exist"),
    ({"fingerprint_files": ["/nonexistent/file.yaml"]}, "fingerprint_files: /nonexistent/file.yaml"),
    ({"environment": {"BAD-NAME": "1"}}, "environment"),
    ({"run_as": "no-such-user-xyz"}, "run_as"),
])
def test_bad_input_fails_naming_the_option_and_launches_nothing(world, args, needle):
    status, r = run(world, **args)
    assert status == "failed" and needle in r["msg"]
    assert world.spawned == []


def test_foreign_process_on_port_refuses_before_anything(world):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        status, r = run(world, port=port)
        assert status == "failed" and ("port %d is held" % port) in r["msg"]
        assert world.spawned == []
    finally:
        s.close()


def test_api_key_is_sent_as_bearer_and_not_in_argv_or_env(world):
    seen = {}

    def http(url, headers, timeout):
        seen.update(headers)
        return 200
    world.http = http
    status, r = run(world, api_key="s3cret-key-0123456")
    assert status == "ok"
    assert seen["Authorization"] == "Bearer s3cret-key-0123456"
    assert all("s3cret" not in a for a in world.spawned[0]["argv"])
    assert all("s3cret" not in v for v in world.spawned[0]["env"].values())


def test_attempt_numbering_and_pruning(world):
    world.health = lambda t: 200
    for i in range(1, 4):
        open(os.path.join(world.log_dir, "sglang_r%d.log" % i), "w").close()
    status, r = run(world, keep_attempts=2, force_restart=True)
    assert r["attempt"] == 4
    assert sorted(f for f in os.listdir(world.log_dir) if f.endswith(".log") and "_r" in f) == ["sglang_r3.log", "sglang_r4.log"]


EAGLE_CRASH = ("[2026-12-02 10:00:01] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
               "#running-req: 0, #queue-req: 0, \n"
               "[2026-12-02 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
               '  File "/x/sglang/srt/managers/scheduler.py", line 2753, in run_scheduler_process\n'
               "    scheduler.event_loop_overlap()\n"
               "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'\n")


def _first_decode_kills_it(world, after):
    """The first decode request kills the server ``after`` s from now: its scheduler logs the crash (health answers no
    more), the leader exits."""
    later(world, after, append(os.path.join(world.log_dir, "sglang.log"), EAGLE_CRASH))
    later(world, after, lambda: setattr(world, "health", lambda t: None))
    later(world, after + 0.05, lambda: setattr(world, "rc", 1))


def test_watched_reports_the_failure_its_supervisor_decided_before_the_watch(world):
    serve(world)
    _first_decode_kills_it(world, 1.0)
    for _ in range(50):
        world.sleep(0.1)  # the supervisor, a process of its own, decides meanwhile, and ends
    status, r = run(world, state="watched", log_offset=-1)
    assert status == "failed" and r["crash_class"] == "first_request_crash", r
    assert "spec_disable_batch_threshold" in r["crash_exception"] and "early-init patch" in r["hint"]
    assert r["traceback"] and "Scheduler hit an exception" in r["deciding_line"]
    assert r["evidence"].startswith("the server's leader process exited")
    assert r["stopped_after_failure"] == {"how": "the supervisor ends the failed tree"}
    assert "decided by its supervisor program" in r["msg"]
    assert len(world.spawned) == 1  # the module watched; it launched nothing


def test_watched_reports_the_failure_its_supervisor_writes_during_the_window(world):
    serve(world)
    _first_decode_kills_it(world, 1.0)
    t0 = world.now
    status, r = run(world, state="watched", watch_time=30)
    assert status == "failed" and r["crash_class"] == "first_request_crash", r
    assert world.now - t0 < 2.0  # at the supervisor's verdict, not at the end of the window
    assert r["log_path"].endswith("sglang_r1.log") and r["log_offset"] == os.path.getsize(r["log_path"])


def test_watched_with_no_supervisor_fails_clearly_and_asks_nothing(world, stops):
    record_self_as_server(world, log_text="[2026-12-02 10:00:00] The server is fired up and ready to roll!\n")
    world.health = lambda t: 200
    status, r = run(world, state="watched", watch_time=5)
    assert status == "failed" and r["supervisor"] == "gone", r
    assert "nothing watches the server" in r["msg"] and "state: started to put a supervisor back" in r["msg"]
    assert world.http_calls == 0 and stops == [] and world.spawned == []


def test_watched_fails_clearly_when_its_supervisor_went_away(world):
    serve(world)
    world.supervisors[0].terminated = True  # killed: no verdict written
    status, r = run(world, state="watched", watch_time=5)
    assert status == "failed" and "nothing watches the server" in r["msg"] and "crash_class" not in r, r


def test_watched_healthy_server_passes_after_the_window(world):
    serve(world)
    t0 = world.now
    status, r = run(world, state="watched", watch_time=5)
    assert status == "ok" and r["changed"] is False, r
    assert world.now - t0 >= 5 and r["elapsed"] >= 5 and r["health_polls"]["last"] == 200
    assert r["msg"].startswith("watched 5.") and "log_crash" not in r
    assert world.supervisors[0].poll() is None  # serving on


def test_watched_returns_a_log_offset_and_warns_about_a_crash_line_set_aside_after_it_not_before(world):
    """The supervisor sets aside a crash line the server outlives (health 200 after it); the watch warns about those at
    or after its start offset: the mark taken before the smoke requests."""
    serve(world)
    log = os.path.join(world.log_dir, "sglang.log")
    later(world, 0.5, append(log, SCHED_CRASH.replace("unhandled system error", "before the mark")))
    for _ in range(30):
        world.sleep(0.1)
    status, mark = run(world, state="watched", watch_time=0, log_offset=-1)
    assert status == "ok" and "log_crash" not in mark, mark
    assert mark["log_offset"] == os.path.getsize(log) and mark["log_watched_from"] == mark["log_offset"]
    after = SCHED_CRASH.replace("unhandled system error", "after the mark")
    later(world, 0.5, append(log, after))
    status, r = run(world, state="watched", watch_time=3, log_offset=mark["log_offset"])
    assert status == "ok", r
    crash = r["log_crash"]
    assert crash["class"] == "nccl" and crash["acted_on"] is False and "after the mark" in crash["exception"]
    assert crash["lineno"] == open(log).read()[:mark["log_offset"]].count("\n") + 1  # the line right after the mark
    assert crash["why"].startswith("every server process stayed alive and the health URL answered 200")
    assert "nothing was stopped" in r["msg"]
    assert any("line %d" % crash["lineno"] in w for w in get_warning_messages())
    status, whole = run(world, state="watched", watch_time=0, log_offset=0)
    assert status == "ok" and whole["log_crash"]["lineno"] < crash["lineno"]  # the one before the mark first
    assert "1 more crash line" in whole["msg"] and world.supervisors[0].poll() is None and world.rc is None


def test_watched_a_crash_line_in_the_window_waits_for_the_supervisors_word(world):
    """A crash whose processes hang (nothing exits, health fails): the crash line stands, so even a 0.2 s window goes
    on until this watch's own requests fail unhealthy_after in a row (1 s apart); the line names the failure. The
    supervisor, for which failed health while serving is only a question, stops nothing."""
    serve(world, serve_health_interval=10.0)
    later(world, 0.5, append(os.path.join(world.log_dir, "sglang.log"), SCHED_CRASH))
    later(world, 0.5, lambda: setattr(world, "health", lambda t: None))
    for _ in range(6):
        world.sleep(0.1)
    t0 = world.now
    status, r = run(world, state="watched", watch_time=0.2)
    assert status == "failed" and r["crash_class"] == "nccl", r
    assert r["evidence"].startswith("the health URL failed 3 requests in a row"), r["evidence"]
    assert world.now - t0 < 4.0  # three requests 1 s apart, not 10 s apart


def test_watched_fails_on_its_own_health_requests_when_no_crash_line_explains_it(world):
    serve(world)
    world.health = lambda t: 503
    polls = []
    http = world.http
    status, r = run(world, state="watched", watch_time=3, unhealthy_after=3,
                    inject={"http": lambda url, headers, timeout: polls.append(world.now) or http(url, headers, timeout)})
    assert status == "failed" and r["crash_class"] == "unhealthy", r
    assert r["evidence"] == "the health URL failed 3 requests in a row (last: HTTP 503), asked by this watch"
    assert all(b - a >= 1.0 for a, b in zip(polls, polls[1:]))
    assert "stopped_after_failure" not in r and "once nothing moved for 300.0 s it is stuck" in r["msg"]


def test_a_detached_server_whose_supervisor_is_gone_and_that_does_not_answer_is_restarted(world, stops):
    state = record_self_as_server(world, fingerprint=fingerprint_of_argv(SERVER_ARGV),
                                  watcher={"pid": UNUSED_PID, "start_time": 1, "cmdline": ["gone"]})
    world.health = lambda t: 200 if t is not None else None  # the old one does not answer; the new one does
    status, r = run(world, argv=SERVER_ARGV, check_mode=True)
    assert status == "ok" and r["changed"] is True and stops == [] and world.spawned == []
    assert r["msg"] == "would restart the server (its supervisor program is gone and the server does not answer health)"
    status, r = run(world, argv=SERVER_ARGV)
    assert status == "ok" and r["changed"] is True, r
    assert r["restart_reason"] == "its supervisor program is gone and the server does not answer health"
    assert r["supervisor"] == "gone" and stops == [state["pid"]] and len(world.spawned) == 1 and r["attempt"] == 2


def test_a_gone_supervisors_unhealthy_server_is_kept_when_the_restart_input_is_bad(world, stops):
    record_self_as_server(world, fingerprint=fingerprint_of_argv(SERVER_ARGV),
                          watcher={"pid": UNUSED_PID, "start_time": 1, "cmdline": ["gone"]})
    status, r = run(world, argv=SERVER_ARGV, chdir="/nonexistent/dir")
    assert status == "failed" and "chdir /nonexistent/dir does not exist" in r["msg"]
    assert stops == [] and world.spawned == []


def test_ready_line_triggers_an_immediate_health_check(world):
    # Health is polled every 0.25 s; when the log says "fired up" the module asks at once.
    world.write(10.01, "[2026-12-02 10:00:10] The server is fired up and ready to roll!\n")
    world.health = lambda t: 200 if t >= 10.01 else None
    status, r = run(world, health_interval=5.0)
    assert status == "ok"
    assert r["elapsed"] <= 10.15


def test_secret_environment_reaches_the_server_and_restarts_on_change(world):
    world.health = lambda t: 200
    status, r = run(world, secret_environment={"HF_TOKEN": "hf_abc"})
    assert status == "ok" and world.spawned[0]["env"]["HF_TOKEN"] == "hf_abc"
    state = json.load(open(os.path.join(world.log_dir, "sglang.json")))
    assert "hf_abc" not in json.dumps(state)
    parts_a = sglang_plan.fingerprint_parts(["x"], {}, [], {}, None, {"HF_TOKEN": "a"})
    parts_b = sglang_plan.fingerprint_parts(["x"], {}, [], {}, None, {"HF_TOKEN": "b"})
    assert sglang_plan.describe_change(parts_a, parts_b) == "fingerprint changed: secret_environment"


def test_fresh_host_check_mode_and_stop_need_no_directories(world):
    missing = os.path.join(world.log_dir, "not", "yet")
    status, r = run(world, check_mode=True, log_dir=missing, fingerprint_files=[os.path.join(missing, "server.yaml")])
    assert status == "ok" and r["changed"] is True and "fresh host" in r["msg"]
    status, r = run(world, state="stopped", log_dir=missing)
    assert status == "ok" and r["changed"] is False
    status, r = run(world, log_dir=missing)  # a real start still needs the directory
    assert status == "failed" and "does not exist" in r["msg"]
    assert world.spawned == []


def test_check_mode_with_a_config_file_not_written_yet(world):
    status, r = run(world, check_mode=True, fingerprint_files=[os.path.join(world.log_dir, "server.yaml")])
    assert status == "ok" and r["changed"] is True and "not written yet" in r["msg"]


# ------------------------------------------------------------------ a detached server whose supervisor is gone
def _served_then_orphaned(world):
    """A serving server of ours (this test process stands in for it) whose recorded supervisor is gone."""
    argv = [sys.executable, "-m", "sglang.launch_server", "--config", "/etc/sglang.yaml"]
    fp = sglang_plan.fingerprint_of(sglang_plan.fingerprint_parts(argv, {}, [], {}, None))
    record_self_as_server(world, fingerprint=fp, watcher={"pid": UNUSED_PID, "start_time": 1, "cmdline": ["gone"]},
                          launcher="detached")
    sglang_proc.write_files(world.log_dir, (("sglang.watcher.json", json.dumps({
        "launch": "l1", "argv": argv, "env": {}, "log_dir": world.log_dir, "health_url": "http://127.0.0.1:1/h",
        "headers": {}, "secrets": [], "settings": {"health_interval": 0.25, "health_timeout": 10, "unhealthy_after": 3,
                                                   "child_grace": 2.0, "settle_time": 0.3, "stall_timeout": 0,
                                                   "poll_interval": 0.1}})),), mode=0o600)
    world.health = lambda t: 200
    return os.getpid()


def test_a_healthy_server_whose_supervisor_is_gone_gets_one_back_without_a_restart(world, stops):
    pid = _served_then_orphaned(world)
    status, r = run(world)
    assert status == "ok" and r["supervisor"] == "restored" and r["changed"] is True, r
    assert r["pid"] == pid and world.spawned == [] and stops == []  # the same server: no restart, nothing stopped
    assert world.supervisors[-1].watcher.adopt and r["supervisor_pid"] == world.supervisors[-1].pid
    state = json.load(open(os.path.join(world.log_dir, "sglang.json")))
    assert state["watcher"]["pid"] == world.supervisors[-1].pid  # the new supervisor is recorded as the server's
    st = json.load(open(os.path.join(world.log_dir, "sglang.status.json")))
    assert st["adopted"] is True and st["verdict"] == "ready" and st["server_pid"] == pid


def test_in_check_mode_a_gone_supervisor_is_reported_and_nothing_is_started(world, stops):
    _served_then_orphaned(world)
    status, r = run(world, check_mode=True)
    assert status == "ok" and r["supervisor"] == "gone" and world.supervisors == [], r


def test_the_next_run_says_so_when_the_supervisor_finds_the_serving_server_stuck(world, stops):
    from module_harness import record_self_as_server
    state = record_self_as_server(world, fingerprint=fingerprint_of_argv(SERVER_ARGV))
    world.health = lambda t: 200
    st = {"attempt": state.get("attempt"), "verdict": "ready", "phase": "ready",
          "status": "serving, stuck: health fails and nothing moved for 300 s (reported, not restarted)",
          "serving": {"activity": {"state": "stuck", "running": 1, "waiting": 0}}}
    sglang_proc.write_files(world.log_dir, (("sglang.status.json", json.dumps(st)),))
    status, r = run(world, argv=SERVER_ARGV)
    assert status == "ok" and r["changed"] is False and r["pid"] == state["pid"] and stops == [], r
    assert r["serving_state"] == "stuck"
    assert any("is stuck by its supervisor's word" in w for w in get_warning_messages())
