"""The supervisor program (module_utils/sglang_supervisor.py, Watcher) on the fake clock, past its verdict: a serving
server is watched with the same decide() as the start. No process, no sleep: the world's fake server, /proc and HTTP
(tests/unit/module_harness.py), the supervisor stepped as the clock moves."""
from __future__ import annotations

import json
import os
import sys

import pytest

from ansible.module_utils import sglang_contract, sglang_proc, sglang_supervisor
from module_harness import Procs, World

SPAWN_WORKER = ["/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)",
                "--multiprocessing-fork"]
READY_LINE = "[2026-12-02 10:00:02] The server is fired up and ready to roll!\n"


def configure(world, **settings):
    s = {"health_interval": 0.25, "health_timeout": 10, "unhealthy_after": 3, "child_grace": 2.0, "settle_time": 0.3,
         "stall_timeout": 0, "poll_interval": 0.1, "serve_health_interval": 10.0}
    s.update(settings)
    cfg = {"launch": "l1", "argv": [sys.executable, "-m", "sglang.launch_server"], "env": {}, "chdir": None,
           "user": None, "log_dir": world.log_dir, "health_url": "http://127.0.0.1:1/health_generate",
           "headers": {}, "secrets": [], "fingerprint": "f" * 64, "fingerprint_parts": {}, "port": 1,
           "keep_attempts": 5, "unit": None, "timeout": 600, "stop_timeout": 30, "tail_lines": 20, "settings": s,
           "journal": False}
    sglang_proc.write_files(world.log_dir, (("sglang.watcher.json", json.dumps(cfg)),), mode=0o600)


class Quiet(sglang_supervisor.Watcher):
    def signals(self):
        pass

    def me(self):
        return {"pid": 4300001, "start_time": 1, "cmdline": ["fake-supervisor"]}


def supervise(world, until):
    """Run the real supervisor (serving on) until it ends or the fake clock passes ``until`` s after the launch."""
    def spawn(cfg, user, out_w, token):
        return world.spawn(cfg["argv"], dict(cfg["env"]), None, out_w, user)
    w = Quiet(world.log_dir, "sglang", clock=world.clock, wall=lambda: 0.0, sleep=world.sleep, spawner=spawn,
              procs=Procs(world), http=world.http)
    start = world.now
    for pause in w.steps():
        if world.now - start >= until:
            break
        world.sleep(pause)
    return w, sglang_proc.read_json(world.log_dir, "sglang.status.json")


@pytest.fixture
def world(tmp_path):
    w = World(str(tmp_path))
    w.children = {4100: 111}
    w.cmdlines = {4100: SPAWN_WORKER}
    w.write(1, READY_LINE)
    return w


def test_a_serving_server_that_answers_no_health_and_moves_nothing_is_stuck_and_with_restart_exits_69(world):
    """Failed health while serving is a question: nothing moved (no log line, no /v1/loads figures) for
    serve_stuck_seconds is ``stuck``; with serve_stuck_action restart that is the failure (exit 69)."""
    configure(world, health_timeout=1, serve_health_interval=2.0, serve_stuck_seconds=300, serve_stuck_action="restart")
    world.health = lambda t: 200 if t is not None and t < 30 else None  # answers, then holds every request
    w, st = supervise(world, 500)
    assert w.code == sglang_contract.EXIT_RESTARTABLE and st["verdict"] == "stuck", st
    assert st["report"]["after_ready"] is True and st["report"]["exit_status"] == 69
    assert "nothing moved" in st["report"]["evidence"]
    # the interval is no shorter than the server's window (20 s) plus the margin: the first failure by ~55 s,
    # then 300 s without anything moving (the last 200 answered at ~25 s)
    assert 300 <= world.now - world.t0 <= 30 + 300 + 1.0


def test_a_serving_server_that_is_stuck_with_the_report_action_is_reported_and_never_stopped(world):
    configure(world, health_timeout=1, serve_health_interval=2.0, serve_stuck_seconds=300)
    world.health = lambda t: 200 if t is not None and t < 30 else None
    w, st = supervise(world, 600)
    assert w.code is None and world.rc is None and st["verdict"] == "ready", st
    assert st["serving"]["activity"]["state"] == "stuck" and st["status"].startswith("serving, stuck"), st
    assert any("STATUS=serving, stuck" in m for m in w.notifier.sent)


def test_a_single_failed_health_request_while_serving_is_no_failure(world):
    configure(world, health_timeout=1, serve_health_interval=2.0)
    world.health = lambda t: None if t is not None and 30 <= t < 31.5 else 200  # one request lost
    w, st = supervise(world, 90)
    assert w.code is None and st["verdict"] == "ready", st


def test_a_child_alive_at_ready_is_part_of_the_serving_server_however_briefly_it_was_seen(world):
    # A plain Python child (not a worker by its command line), seen for less than child_grace before ready: its
    # death after ready is evidence (the cause of a flaky test: it used to be forgotten).
    configure(world, child_grace=30.0)
    world.children = {4200: 222}
    world.cmdlines = {4200: ["/usr/bin/python3", "-c", "from multiprocessing.resource_tracker import main;main(7)"]}
    world.health = lambda t: 200 if t is not None and t >= 1 else None
    world.at(20, lambda: world.children.pop(4200))
    w, st = supervise(world, 60)
    assert w.code == sglang_contract.EXIT_RESTARTABLE and st["verdict"] == "child_died", st
    assert st["report"]["evidence"] == "worker PID 4200 of the server died"


def test_a_crash_line_the_serving_server_outlives_stops_nothing(world):
    configure(world, serve_health_interval=2.0)
    world.health = lambda t: 200 if t is not None and t >= 1 else None
    world.write(20, "[2026-12-02 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                    "RuntimeError: NCCL error: unhandled system error\n")
    w, st = supervise(world, 60)
    assert w.code is None and st["verdict"] == "ready" and world.rc is None, st


# ------------------------------------------------------------------ what a watch of the serving server reads
CRASH_LINE = ("[2026-12-02 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\x1b[2J\n"
              "RuntimeError: NCCL error: unhandled system error\n")


class Counting(Quiet):
    writes = 0

    def write_status(self, **fields):
        Counting.writes += 1
        super(Counting, self).write_status(**fields)


def steps(world, cls=Quiet):
    """The real supervisor (serving on) and its steps, for a test that looks at its status between them."""
    def spawn(cfg, user, out_w, token):
        return world.spawn(cfg["argv"], dict(cfg["env"]), None, out_w, user)
    w = cls(world.log_dir, "sglang", clock=world.clock, wall=lambda: 0.0, sleep=world.sleep, spawner=spawn,
            procs=Procs(world), http=world.http)
    return w, w.steps()


def run_until(world, gen, t):
    """Step the supervisor until ``t`` s after the launch."""
    for pause in gen:
        world.sleep(pause)
        if world.t0 is not None and world.now - world.t0 >= t:
            return


def status(world):
    return sglang_proc.read_json(world.log_dir, "sglang.status.json")


def test_a_crash_line_the_serving_server_outlives_is_set_aside_with_its_byte_offset(world):
    configure(world, serve_health_interval=2.0)
    world.health = lambda t: 200 if t is not None and t >= 1 else None
    world.write(20, CRASH_LINE)
    w, st = supervise(world, 40)
    assert w.code is None and st["verdict"] == "ready", st
    serving = st["serving"]
    (aside,) = serving["set_aside"]
    assert aside["class"] == "nccl" and aside["lineno"] == 2 and aside["offset"] == len(READY_LINE.encode())
    assert "\x1b" not in aside["line"] and "\\x1b[2J" in aside["line"]  # escaped: a client's bytes
    assert aside["why"].startswith("every server process stayed alive and the health URL answered 200")
    assert serving["set_aside_total"] == 1 and serving["crash_pending"] is None
    assert serving["log_read"] == os.path.getsize(st["log_path"]) == len((READY_LINE + CRASH_LINE).encode())
    assert serving["health"] == {"last": 200, "failed_in_a_row": 0} and serving["unhealthy_after"] == 3


def test_a_crash_line_that_stands_while_serving_is_recorded_and_a_stuck_server_is_named_by_it(world):
    """A crash line that stands (health fails after it) is recorded at once; failed health is no verdict by itself,
    but with our own request after the line failed and nothing moving for one health interval (25 s: the server's
    20 s window + 5 s) since, the server is stuck (not after serve_stuck_seconds): the restart action ends it, named
    by the line."""
    configure(world, health_timeout=1, serve_health_interval=10.0, serve_stuck_seconds=300,
              serve_stuck_action="restart")
    world.health = lambda t: 200 if t is not None and 1 <= t < 20 else None
    world.write(20, CRASH_LINE)
    w, gen = steps(world)
    run_until(world, gen, 20.6)
    pending = status(world)["serving"]["crash_pending"]
    assert pending["class"] == "nccl" and pending["offset"] == len(READY_LINE.encode()) and pending["lineno"] == 2
    run_until(world, gen, 40)
    assert w.code is None and status(world)["verdict"] == "ready"  # a question, not a verdict
    run_until(world, gen, 120)
    st = status(world)
    assert st["verdict"] == "nccl" and w.code == sglang_contract.EXIT_RESTARTABLE, st
    assert "for an interval after the crash line" in st["report"]["evidence"]
    assert world.now - world.t0 <= 20 + 25 + 1.0


def test_while_serving_the_status_is_written_when_what_a_watch_reads_changes_not_on_every_look(world):
    configure(world, serve_health_interval=2.0)
    world.health = lambda t: 200 if t is not None and t >= 1 else None
    Counting.writes = 0
    w, gen = steps(world, Counting)
    run_until(world, gen, 10)
    quiet = Counting.writes
    run_until(world, gen, 70)
    assert Counting.writes == quiet  # 60 s serving, health answering, nothing logged: not one write
    log = status(world)["log_path"]
    for i in range(300):  # a chatty log: a line every 0.1 s for 30 s
        world.at(70 + i * 0.1, lambda: open(log, "a").write("[2026-12-02 10:01:00] Decode batch. #running-req: 1\n"))
    run_until(world, gen, 101)
    assert 20 <= Counting.writes - quiet <= 32  # log_read moves, written at most once a second
    assert status(world)["serving"]["log_read"] == os.path.getsize(log)


RAW_ECHO_FAKE_OOM = (
    "[2026-12-03 09:24:18] Receive: obj=GenerateReqInput(rid='1', text='hi', input_ids=None, sampling_params={})\n"
    "[2026-12-03 09:24:19 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.72 GiB.\n")
REAL_NCCL = ("[2026-12-03 09:24:20 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
             "    scheduler.event_loop_overlap()\n"
             "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n")


def test_a_death_seen_before_the_servers_own_crash_line_is_in_the_log_is_not_named_by_a_prompts_fake(world):
    """A raw request echo (an older SGLang's --log-requests) wrote a complete fake traceback; the same request kills
    the server, whose own traceback is still on its way through the log copy when the supervisor sees the death. The
    drain gives the log its whole settle time then (the standing crash may be a client's), so the server's own line
    explains the death."""
    configure(world, serve_health_interval=2.0, settle_time=0.3, poll_interval=0.1)
    world.health = lambda t: 200 if t is not None and t >= 1 else None
    w, gen = steps(world)
    run_until(world, gen, 20)
    log = status(world)["log_path"]
    with open(log, "a") as fh:
        fh.write(RAW_ECHO_FAKE_OOM)
    world.health = lambda t: None
    world.rc = 1  # the leader is gone before the look
    world.at(world.now - world.t0 + 0.05, lambda: open(log, "a").write(REAL_NCCL))  # copied during the drain
    run_until(world, gen, 30)
    st = status(world)
    assert st["verdict"] == "nccl" and st["report"]["class_uncertain"] is True, st["report"]
    assert "DistBackendError" in st["report"]["crash_exception"] and "1 earlier crash line set aside" in \
        st["report"]["hint"]
