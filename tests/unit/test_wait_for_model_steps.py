"""wait_for_model in steps (step_time, resume_attempt), the detached launcher, on the harness's fake clock: a step
that ends while the server loads is a result, not a failure; a later step of the same attempt goes on with that
launch's wait (never a second restart, the log read from its start, the time counted from the launch)."""
from __future__ import annotations

import sys

from ansible.module_utils import sglang_contract, sglang_plan, sglang_proc
import wait_for_model as wfm
from test_wait_for_model_systemd import READY as UNIT_LOADING, systemd_run
from module_harness import SCHED_CRASH, append, later, module_exits, record_self_as_server, run, stops, world  # noqa: F401 - fixtures

ARGV = [sys.executable, "-m", "sglang.launch_server", "--config", "/etc/sglang.yaml"]
LOADING = ("[2026-12-03 10:00:01] Load weight begin. avail mem=78.00 GB\n"
           "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:02<00:02,  1.00s/it]\n")
READY = "[2026-12-03 10:00:09] The server is fired up and ready to roll!\n"
SPAWN_WORKER = ["/usr/bin/python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)",
                "--multiprocessing-fork"]


def same_fingerprint():
    return sglang_plan.fingerprint_of(sglang_plan.fingerprint_parts(ARGV, {}, [], {}, None))


def test_a_step_that_ends_while_loading_is_pending_not_failed(world, module_exits):  # noqa: F811
    world.health = lambda t: None  # still loading
    status, r = run(world, _step_time=1.0, run_as=None)
    assert status == "ok" and r["pending"] is True and r["changed"] is True
    assert r["progress"]["attempt"] == 1 and r["progress"]["launcher"] == "detached"
    assert len(world.spawned) == 1 and not world.killed  # nothing is stopped at the end of a step


def test_a_later_step_whose_supervisor_is_gone_restarts_the_server_that_does_not_answer(world, stops,
                                                                                          module_exits):  # noqa: F811
    # The launch's supervisor was killed between two steps: nothing follows the load (nor copies its output), and
    # the module watches no server itself, so the server is started again under a supervisor of its own.
    state = record_self_as_server(world, fingerprint=same_fingerprint(), log_text=LOADING, started_at=-30.0,
                                  watcher={"pid": 4000000, "start_time": 1, "cmdline": ["gone"]})
    world.health = lambda t: 200 if t is not None and t > 0.3 else None  # the first look: not yet
    status, r = run(world, _resume_attempt=1, run_as=None)
    assert status == "ok" and r["changed"] is True, r
    assert r["restart_reason"] == "its supervisor program is gone and the server does not answer health"
    assert stops == [state["pid"]] and len(world.spawned) == 1 and r["attempt"] == 2


def test_without_resume_attempt_the_same_server_is_an_attach(world, monkeypatch, module_exits):  # noqa: F811
    from ansible.module_utils import sglang_proc
    world.health = lambda t: 200 if t is not None and t >= 5 else None
    status, r = run(world, _step_time=1.0, run_as=None)
    assert status == "ok" and r["pending"] is True, r
    monkeypatch.setattr(sglang_proc, "why_not_ours", lambda state: None)  # the fake server counts as ours
    status, r = run(world, run_as=None, health_timeout=0.5)
    assert status == "ok" and r["changed"] is False and len(world.spawned) == 1, r
    assert r["msg"].startswith("attached to our server (same fingerprint, its supervisor program)")


def test_a_later_step_takes_the_supervisors_verdict_and_times_even_when_its_own_probe_is_answered(world, monkeypatch,
                                                                                                   module_exits):  # noqa: F811
    # The launch's first step ends while loading; the server then answers between two steps. The next step reports
    # the supervisor's verdict with the load's time since the launch and its phases, never "0.0 s, no phases".
    from ansible.module_utils import sglang_proc
    world.write(1, "[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n")
    world.health = lambda t: 200 if t is not None and t >= 5 else None
    status, r = run(world, _step_time=1.0)
    assert status == "ok" and r["pending"] is True and r["attempt"] == 1, r
    monkeypatch.setattr(sglang_proc, "why_not_ours", lambda state: None)  # the fake server counts as ours
    for _ in range(100):
        world.sleep(0.1)  # 10 s between the steps: the supervisor, a process of its own, decides ready meanwhile
    status, r = run(world, _step_time=1.0, _resume_attempt=1)
    assert status == "ok" and not r.get("pending"), r
    assert len(world.spawned) == 1  # no second launch
    assert 5.0 <= r["elapsed"] < 5.6, r["elapsed"]  # the supervisor's ready_after, since the launch
    assert [p["phase"] for p in r["phases"]][:2] == ["launching", "loading_weights"]
    assert r["progress"]["verdict"] == "ready"


def _held(world, every=0.05):
    """The module's own health request as a server whose scheduler died holds it (SGLang's SIGQUIT handler sleeps in
    its event loop): no answer until the request's timeout, while time goes on, the supervisor's too."""
    def http(url, headers, timeout):
        end = world.now + timeout
        while world.now < end - 1e-9:
            world.sleep(min(every, end - world.now))
        return None
    return http


def _verdict_stamp(world):
    """[when the supervisor's status file first held a verdict] on the fake clock, looked at after every move of it."""
    stamp = []

    def look():
        if not stamp:
            st = sglang_proc.read_json(world.log_dir, sglang_contract.STATUS % "sglang") or {}
            if st.get("verdict") is not None:
                stamp.append(world.now)
    world.tickers.append(look)  # after the fake supervisor's own tick: it sees what that look wrote
    return stamp


def test_a_verdict_written_early_in_a_later_step_ends_that_step_at_the_next_wake_up(world, monkeypatch,
                                                                                   module_exits):  # noqa: F811
    # The first step of a 10 s step ends while loading. 0.1 s into the next one the scheduler dies and the supervisor
    # writes its verdict: that step ends at its next wake-up, not when a health request of its own, held by the dying
    # server, times out, nor at the step's end.
    world.children = {4100: 111}
    world.cmdlines = {4100: SPAWN_WORKER}
    world.health = lambda t: None  # loading: nothing answers yet
    status, r = run(world, _step_time=10.0, inject={"http": _held(world)})
    assert status == "ok" and r["pending"] is True and r["attempt"] == 1, r
    monkeypatch.setattr(sglang_proc, "why_not_ours", lambda state: None)  # the fake server counts as ours
    stamp = _verdict_stamp(world)
    step = world.now
    later(world, 0.05, append(r["log_path"], SCHED_CRASH))
    later(world, 0.1, lambda: world.children.pop(4100))  # the scheduler exits after its traceback
    status, r = run(world, _step_time=10.0, _resume_attempt=1, inject={"http": _held(world)})
    assert status == "failed" and r["crash_class"] == "nccl", r
    assert stamp and stamp[0] - step <= 0.1 + 0.1 + 1e-6, (stamp, step)  # written at its next look (poll_interval)
    assert world.now - stamp[0] <= 0.1 + 1e-6, (world.now - step, stamp[0] - step)  # one poll_interval later


def test_with_systemd_a_verdict_written_early_in_a_later_step_ends_that_step_at_the_next_wake_up(world, monkeypatch,
                                                                                                module_exits):  # noqa: F811
    # The same with launcher=systemd: the unit's watcher writes the verdict 0.1 s into the next step.
    world.http = _held(world)  # no fake supervisor here: only the module asks
    status, r, fake = systemd_run(world, UNIT_LOADING[:1], _step_time=10.0)
    assert status == "ok" and r["pending"] is True and r["attempt"] == 3, r
    record_self_as_server(world, fingerprint=r["fingerprint"], launcher="systemd", attempt=3)
    monkeypatch.setattr(sglang_proc, "why_not_ours", lambda state: None)  # the recorded server counts as ours
    launch = sglang_proc.read_json(world.log_dir, sglang_contract.CONFIG % "sglang")["launch"]
    stamp = _verdict_stamp(world)
    step = world.now
    later(world, 0.1, fake._writer(launch, {"verdict": "crashed", "phase": "ready", "report": {
        "crash_class": "python_exception", "msg": "server crashed: python_exception", "exit_status": 78}}))
    status, r, fake = systemd_run(world, [], _step_time=10.0, _resume_attempt=3, fake=fake, role=False)
    assert status == "failed" and r["crash_class"] == "python_exception", r
    assert stamp and stamp[0] - step <= 0.1 + 0.1 + 1e-6, (stamp, step)  # seen at the clock's next move
    assert world.now - stamp[0] <= 0.1 + 1e-6, (world.now - step, stamp[0] - step)
