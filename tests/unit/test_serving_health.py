"""Health that never harms a serving server (issue 33): the supervisor (module_utils/sglang_supervisor.py) against a fake
SGLang 0.5.23 health handler on the fake clock, and the probe gate (module_utils/sglang_probe.py). No process, no
sleep: the world's fake server, /proc and HTTP (tests/unit/module_harness.py)."""
from __future__ import annotations

import json
import os

import pytest

from ansible.module_utils import sglang_contract, sglang_probe, sglang_proc
from module_harness import Procs, World
from test_supervisor import READY_LINE, SPAWN_WORKER, Quiet, configure


class Sglang0523(object):
    """SGLang 0.5.23's health as the fake clock sees it: a health request waits up to ``window`` s for any output;
    the scheduler skips it while busy (a prefill), and it stays resident there until the scheduler is free, whether
    its handler answered 503 or its client gave up. ``busy``: [(start, end)] after the launch."""

    def __init__(self, world, window=20.0, busy=(), running=1):
        self.world, self.window, self.busy, self.running = world, window, list(busy), running
        self.resident = 0
        self.most_resident = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.health_calls = []

    def t(self):
        return self.world.now - self.world.t0

    def is_busy(self):
        return any(a <= self.t() < b for a, b in self.busy)

    def http(self, url, headers, timeout):
        self.health_calls.append((self.t(), timeout))
        if not self.is_busy():
            self.resident = 0  # a free scheduler takes every resident probe out
            return 200
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.resident += 1
        self.most_resident = max(self.most_resident, self.resident)
        wait = min(timeout, self.window)
        self.world.now += wait  # the request's time passes (the fake clock; events fire at the next sleep)
        self.in_flight -= 1
        return 503 if self.window <= timeout else None

    def fetch(self, url, headers, timeout):
        if url.endswith("/v1/loads"):
            n = self.running if self.is_busy() else 0
            return 200, json.dumps({"loads": [{"num_running_reqs": n, "num_waiting_reqs": 0}]}).encode()
        return 404, b""


def supervise(world, server, until, **kw):
    def spawn(cfg, user, out_w, token):
        return world.spawn(cfg["argv"], dict(cfg["env"]), None, out_w, user)
    w = Quiet(world.log_dir, "sglang", clock=world.clock, wall=lambda: 0.0, sleep=world.sleep, spawner=spawn,
              procs=Procs(world), http=server.http, fetch=server.fetch)
    start = world.now
    states = set()
    for pause in w.steps():
        if world.now - start >= until:
            break
        world.sleep(pause)
        if w.w is not None:
            states.add(w.w.serve_state)
    return w, sglang_proc.read_json(world.log_dir, "sglang.status.json"), states


@pytest.fixture
def world(tmp_path):
    w = World(str(tmp_path))
    w.children = {4100: 111}
    w.cmdlines = {4100: SPAWN_WORKER}
    w.write(1, READY_LINE)
    return w


def test_a_server_in_a_60_s_prefill_under_the_supervisor_for_10_minutes_is_never_stopped_nor_failed(world):
    configure(world)  # health_timeout 10, serve_health_interval 10, unhealthy_after 3: the old numbers
    server = Sglang0523(world, busy=[(30, 90), (200, 260), (400, 460)])
    w, st, states = supervise(world, server, 600)
    assert w.code is None and world.rc is None and st["verdict"] == "ready", st
    assert "busy" in states and "stuck" not in states
    assert st["serving"]["activity"]["state"] is None  # answers again after each prefill
    assert server.most_resident <= 1 and server.most_in_flight <= 1
    # every request outlasts the server's window, and none comes sooner than the window after the last
    assert all(timeout > 20 for _t, timeout in server.health_calls[1:])
    times = [t for t, _timeout in server.health_calls if t > 5]
    assert all(b - a >= 20 for a, b in zip(times, times[1:]))


def test_busy_is_in_the_status_and_the_units_status_while_the_prefill_runs(world):
    configure(world)
    server = Sglang0523(world, busy=[(30, 400)], running=3)
    log = []

    def line():
        if os.path.exists(os.path.join(world.log_dir, "sglang_r1.log")):
            with open(os.path.join(world.log_dir, "sglang_r1.log"), "a") as fh:
                fh.write("[2026-12-02 10:01:00 TP0] Prefill batch. #new-seq: 1, #new-token: 8192\n")
    for i in range(36):
        world.at(35 + i * 10, line)
    w, st, states = supervise(world, server, 300)
    log.append(st)
    assert w.code is None and st["serving"]["activity"] == {"state": "busy", "running": 3, "waiting": 0,
                                                           "health_kept_back": 0}, st
    assert st["status"].startswith("serving, busy") and any("STATUS=serving, busy" in m for m in w.notifier.sent)
    assert server.most_resident <= 1


@pytest.mark.parametrize("action", ["report", "restart"])
def test_a_stuck_server_gets_the_configured_action_after_the_window(world, action):
    configure(world, serve_stuck_seconds=120, serve_stuck_action=action)
    server = Sglang0523(world, busy=[(30, 10 ** 6)])  # a hung forward pass: requests run, nothing moves
    w, st, states = supervise(world, server, 400)
    if action == "restart":
        assert w.code == sglang_contract.EXIT_RESTARTABLE and st["verdict"] == "stuck" and world.rc == -15, st
        assert 120 <= world.now - world.t0 <= 30 + 120 + 25 + 2  # 120 s after the last thing that moved
    else:
        assert w.code is None and world.rc is None and st["verdict"] == "ready", st
        assert st["serving"]["activity"]["state"] == "stuck" and "stuck" in states
    assert server.most_resident <= 1


def test_a_dead_server_is_still_reported_within_a_second_during_a_prefill(world):
    configure(world)
    server = Sglang0523(world, busy=[(30, 10 ** 6)])
    world.at(100, lambda: setattr(world, "rc", -9))
    w, st, _states = supervise(world, server, 400)
    assert w.code == sglang_contract.EXIT_RESTARTABLE and st["verdict"] == "killed", st
    # the request in the server's window may hold the fake clock; the look after it decides at once
    assert world.now - world.t0 <= 100 + 25 + 1.0


def test_the_window_is_read_from_the_servers_environment(world):
    configure(world)
    cfg = sglang_proc.read_json(world.log_dir, "sglang.watcher.json")
    cfg["env"] = {"SGLANG_HEALTH_CHECK_TIMEOUT": "4"}
    sglang_proc.write_files(world.log_dir, (("sglang.watcher.json", json.dumps(cfg)),), mode=0o600)
    server = Sglang0523(world, window=4.0, busy=[(30, 90)])
    w, st, _states = supervise(world, server, 200)
    assert st["serving"]["health_window"] == 4.0 and st["serving"]["serve_health_interval"] == 10.0
    assert st["serving"]["health_timeout"] == 10.0  # already past 4 + 5
    assert server.most_resident <= 1 and w.code is None


# ------------------------------------------------------------------ the gate
def test_two_gates_of_one_server_never_let_two_requests_in(tmp_path):
    now = [100.0]
    a = sglang_probe.ProbeGate(str(tmp_path), "sglang", 20.0, clock=lambda: now[0])
    b = sglang_probe.ProbeGate(str(tmp_path), "sglang", 20.0, clock=lambda: now[0])
    held = a.enter()
    assert held is not None and b.enter() is None
    a.leave(held, answered=True)
    held = b.enter()
    assert held is not None
    b.leave(held, answered=True)
    st = os.stat(os.path.join(str(tmp_path), "sglang.probe.lock"))
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()


def test_an_abandoned_request_keeps_the_gate_shut_until_its_window_on_the_server_is_over(tmp_path):
    now = [100.0]
    a = sglang_probe.ProbeGate(str(tmp_path), "sglang", 20.0, clock=lambda: now[0])
    b = sglang_probe.ProbeGate(str(tmp_path), "sglang", 20.0, clock=lambda: now[0])
    a.leave(a.enter(), answered=False)  # its client gave up (or died): the server may still hold it
    now[0] += 20.0
    assert b.enter() is None and b.free_at == 100.0 + 20.0 + sglang_probe.MARGIN
    now[0] += sglang_probe.MARGIN
    held = b.enter()
    assert held is not None
    b.leave(held, answered=True)


def test_a_gated_ask_counts_a_refused_request_as_no_resident_and_a_timed_out_one_as_resident(tmp_path):
    now = [100.0]
    clock = lambda: now[0]  # noqa: E731
    gate = sglang_probe.ProbeGate(str(tmp_path), "sglang", 20.0, clock=clock)
    assert sglang_probe.gated(lambda t: None, gate, clock)(25.0) is None  # refused at once
    assert gate.enter() not in (None,)

    def times_out(t):
        now[0] += t
        return None
    gate2 = sglang_probe.ProbeGate(str(tmp_path), "other", 20.0, clock=clock)
    assert sglang_probe.gated(times_out, gate2, clock)(22.0) is None  # the server may hold it: resident
    assert sglang_probe.gated(lambda t: 200, gate2, clock)(25.0) == sglang_probe.GATED
    now[0] = 125.0  # its window is over, but a scheduler keeps a health request it skipped while busy
    assert sglang_probe.gated(lambda t: 200, gate2, clock)(25.0) == sglang_probe.GATED
    now[0] = 100.0 + sglang_probe.RESIDENT_BLIND * (20.0 + sglang_probe.MARGIN)  # nothing can tell: blind bound
    assert sglang_probe.gated(lambda t: 200, gate2, clock)(25.0) == 200


def _gate(tmp_path, now, idle, name="sglang"):
    return sglang_probe.ProbeGate(str(tmp_path), name, 20.0, clock=lambda: now[0], idle=lambda: idle[0])


def test_a_503_after_the_window_keeps_the_gate_shut_for_every_asker_until_the_server_is_seen_idle(tmp_path):
    """SGLang answers 503 when its window passed without output, and its scheduler keeps the request it skipped
    while busy: no second request of ours (the supervisor's or the module's) goes in until /v1/loads shows it idle."""
    now, idle = [100.0], [False]

    def window_503(t):
        now[0] += 20.0
        return 503
    supervisor, module = _gate(tmp_path, now, idle), _gate(tmp_path, now, idle)
    assert sglang_probe.gated(window_503, supervisor, lambda: now[0])(25.0) == 503
    sent = []
    for step in range(40):  # a 100 s prefill: requests running the whole time
        now[0] += 2.5
        assert sglang_probe.gated(lambda t: sent.append(t) or 200, module, lambda: now[0])(25.0) == sglang_probe.GATED
    assert not sent and module.kept_back == 40 and module.free_at == now[0] + 1.0
    idle[0] = True  # the prefill is over: nothing running or waiting
    assert sglang_probe.gated(lambda t: 200, module, lambda: now[0])(25.0) == 200
    idle[0] = False  # a 200 took it out: the next goes while busy again
    assert sglang_probe.gated(lambda t: 200, supervisor, lambda: now[0])(25.0) == 200


def test_a_503_at_once_is_not_resident_and_a_new_server_process_holds_none(tmp_path):
    now, idle = [100.0], [False]
    gate = _gate(tmp_path, now, idle)
    assert sglang_probe.gated(lambda t: 503, gate, lambda: now[0])(25.0) == 503  # answered at once: never held
    assert sglang_probe.gated(lambda t: 200, gate, lambda: now[0])(25.0) == 200

    def window_503(t):
        now[0] += 20.0
        return 503
    assert sglang_probe.gated(window_503, gate, lambda: now[0])(25.0) == 503
    assert sglang_probe.gated(lambda t: 200, gate, lambda: now[0])(25.0) == sglang_probe.GATED
    gate.forget()  # the supervisor started a new server process
    assert sglang_probe.gated(lambda t: 200, gate, lambda: now[0])(25.0) == 200


def test_the_idle_check_reads_v1_loads_and_says_none_when_it_cannot_tell():
    asked = []

    def fetch(url, headers, timeout):
        asked.append(url)
        return answers.pop(0)
    answers = [(200, b'{"loads": [{"num_running_reqs": 0, "num_waiting_reqs": 0}]}'),
               (200, b'{"loads": [{"num_running_reqs": 2, "num_waiting_reqs": 0}]}'), None, (404, b"")]
    idle = sglang_probe.idle_check(fetch, "http://127.0.0.1:3000/health_generate", {})
    assert [idle(), idle(), idle(), idle()] == [True, False, None, None]
    assert asked == ["http://127.0.0.1:3000/v1/loads"] * 4
    assert sglang_probe.idle_check(None, "http://127.0.0.1:3000/health", {})() is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant a file of another user")
def test_a_gate_file_planted_by_another_user_is_replaced_never_trusted(tmp_path):
    path = os.path.join(str(tmp_path), "sglang.probe.lock")
    with open(path, "w") as fh:
        fh.write(json.dumps({"sent": 0, "until": 10 ** 12, "answered": False, "boot": sglang_proc.boot_id()}))
    os.chown(path, 65534, 65534)
    gate = sglang_probe.ProbeGate(str(tmp_path), "sglang", 20.0, clock=lambda: 100.0)
    held = gate.enter()
    assert held is not None and os.stat(path).st_uid == 0
    gate.leave(held, answered=True)


def test_the_window_comes_from_the_environment_and_timeouts_and_intervals_outlast_it():
    assert sglang_probe.health_window({}) == 20.0
    assert sglang_probe.health_window({"SGLANG_HEALTH_CHECK_TIMEOUT": "45"}) == 45.0
    assert sglang_probe.health_window({"SGLANG_HEALTH_CHECK_TIMEOUT": "junk"}) == 20.0
    assert sglang_probe.probe_timeout(10, 20.0) == 25.0 and sglang_probe.probe_timeout(60, 20.0) == 60
    assert sglang_probe.serve_interval(10, 20.0) == 25.0


# ------------------------------------------------------------------ state: watched, with the supervisor's word
def _watch_with(tmp_path, activity, pending=None):
    from ansible.module_utils import sglang_serving_watch
    log = tmp_path / "s_r1.log"
    log.write_bytes(b"[2026-12-02 10:00:02] The server is fired up and ready to roll!\n")
    fd = os.open(str(log), os.O_RDONLY)
    now = [100.0]
    asked = []

    def ask(timeout):  # SGLang 0.5.23 in a long prefill: its window (20 s) passes, then 503
        asked.append(timeout)
        now[0] += 20.0
        return 503

    serving = {"set_aside": [], "set_aside_total": 0, "crash_pending": pending, "log_read": log.stat().st_size,
               "health": {"last": 503, "failed_in_a_row": 1}, "health_window": 20.0, "serve_stuck_seconds": 300.0,
               "serve_stuck_action": "report", "activity": activity}
    st = {"attempt": 1, "verdict": "ready", "serving": serving}
    p = {"log_offset": 0, "watch_time": 3.0, "health_interval": 0.25, "health_timeout": 10.0, "unhealthy_after": 3,
         "poll_interval": 0.1, "log_tail_lines": 5, "name": "s", "environment": {}, "secret_environment": {}}
    w = sglang_serving_watch.Watched(p, {"attempt": 1, "pid": 4000001, "log_path": str(log)}, fd, lambda: st,
                               lambda: True, ask, lambda: now[0], lambda dt: now.__setitem__(0, now[0] + dt), False)
    try:
        return w.run(), asked
    finally:
        os.close(fd)


def test_watched_a_busy_server_is_no_failure_and_one_request_of_ours_at_most(tmp_path):
    (r, notes), asked = _watch_with(tmp_path, {"state": "busy", "running": 2, "waiting": 0})
    assert r.get("failed") is not True and r["serving_state"] == "busy", r
    assert "busy" in r["msg"] and notes and "nothing was stopped" in notes[0]
    assert asked == [25.0]  # one request, given more than the server's window, and no other after it failed


def test_watched_a_stuck_server_fails_the_watch_and_signals_nothing(tmp_path):
    (r, _notes), asked = _watch_with(tmp_path, {"state": "stuck", "running": 2, "waiting": 0})
    assert r["failed"] is True and r["crash_class"] == "stuck" and r["serving_state"] == "stuck", r
    assert "not restarted" in r["msg"] and "stopped_after_failure" not in r


def test_a_starts_short_request_that_timed_out_keeps_the_gate_shut_for_its_window_only(tmp_path):
    """During a start the supervisor's requests have a short timeout (under the server's window): one that timed out
    keeps the gate shut until its window on the server is over, as an abandoned one does; never longer (a loading
    server has no /v1/loads to show it idle)."""
    now, idle = [100.0], [None]

    def times_out(t):
        now[0] += t
        return None
    gate = _gate(tmp_path, now, idle)
    assert sglang_probe.gated(times_out, gate, lambda: now[0])(2.0) is None
    now[0] = 100.0 + 20.0 + sglang_probe.MARGIN - 0.1
    assert sglang_probe.gated(lambda t: 200, gate, lambda: now[0])(2.0) == sglang_probe.GATED
    now[0] += 0.1
    assert sglang_probe.gated(lambda t: 200, gate, lambda: now[0])(2.0) == 200
