"""wait_for_model with secrets: the supervisor's log copy masks them, and the API key reaches it only through the
server's --config file. A run state of an older eagle-deploy records a separate log writer process: it is still
reported, and ended last by stop_tree. Fake world (tests/unit/module_harness.py) and a fake /proc for stop_tree:
no process is spawned or signalled. The real LogCopy on real SGLang-shaped output: tests/integration."""
from __future__ import annotations

import errno
import json
import os
import signal

import pytest

from ansible.module_utils import sglang_proc as sp
from ansible.module_utils.common.warnings import get_warning_messages

from ansible.module_utils import sglang_launch
from ansible.module_utils import sglang_plan
import wait_for_model as wfm
from module_harness import Popener, World, module_exits, record_self_as_server, run, stops  # noqa: F401

KEY = "s3cret-api-key-0123"
READY = "[2026-12-02 10:00:02] The server is fired up and ready to roll!\n"


@pytest.fixture
def world(tmp_path, module_exits):  # noqa: F811 - the fixture of module_harness, used by name
    w = World(str(tmp_path))
    w.write(0.5, READY)
    w.health = lambda t: 200 if t is not None and t >= 0.5 else None
    return w


def state_of(world):
    return sp.read_state(world.log_dir, "sglang")


def supervisor_config(world):
    return sp.read_json(world.log_dir, "sglang.watcher.json")


def redacted(world):
    """The secrets the supervisor's log copy masks (each secret's raw form is one of its forms)."""
    forms = set(world.supervisors[0].watcher.copy.redactor.forms)
    return forms


def test_no_secret_nothing_to_mask(world):
    status, r = run(world)
    assert status == "ok"
    cfg = supervisor_config(world)
    assert cfg["secrets"] == [] and not cfg.get("api_key_file")
    assert redacted(world) == set() and "log_writer" not in state_of(world)


def test_the_api_key_reaches_the_supervisor_only_through_the_servers_config_file(world):
    asked = []
    world.http = lambda url, headers, timeout: (asked.append(dict(headers)), world.health(world.now - world.t0))[1]
    status, r = run(world, api_key=KEY, run_as=None)
    assert status == "ok", r
    cfg = supervisor_config(world)
    assert KEY not in json.dumps(cfg)  # its one copy on disk is the server's 0600 --config file
    assert cfg["api_key_file"]["key"] == "api-key" and cfg["api_key_file"]["path"].endswith(".yaml")
    assert KEY.encode() in redacted(world)  # the supervisor read it there: the log never shows it
    assert {"Authorization": "Bearer %s" % KEY} in asked  # and asks health with it
    state = state_of(world)
    assert KEY not in json.dumps(state) and KEY not in json.dumps(world.spawned[0]["argv"])
    assert KEY not in json.dumps(world.spawned[0]["env"])


def test_every_secret_is_masked_by_the_supervisor_and_a_short_redact_string_is_warned_about(world):
    status, r = run(world, api_key=KEY, secret_environment={"HF_TOKEN": "hf_abcdef"},
                    redact=["extra-secret", KEY, "abc"])
    assert status == "ok", r
    assert supervisor_config(world)["secrets"] == ["hf_abcdef", "extra-secret"]  # the key only in the --config file
    assert {KEY.encode(), b"hf_abcdef", b"extra-secret"} <= redacted(world)
    warnings = get_warning_messages()
    assert any("shorter than 4 characters" in w for w in warnings)
    assert not any("hf_abcdef" in w or KEY in w for w in warnings)


def test_the_redact_list_is_part_of_the_fingerprint_by_hash():
    plain = sglang_plan.fingerprint_parts(["/bin/true"], {}, [], {}, None)
    more = sglang_plan.fingerprint_parts(["/bin/true"], {}, [], {}, None, redact=["another-secret"])
    assert "redact" not in plain  # no list: the fingerprint of a server without one is unchanged
    assert sglang_plan.describe_change(plain, more) == "fingerprint changed: redact"
    assert "another-secret" not in json.dumps(more)


def test_a_supervisor_that_cannot_start_starts_nothing(world, monkeypatch):
    def refuse(self, *a, **kw):
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
    monkeypatch.setattr(Popener, "spawn_supervisor", refuse)
    status, r = run(world, api_key=KEY)
    assert status == "failed" and "could not start the supervisor program" in r["msg"]
    assert world.spawned == [] and state_of(world) is None
    assert not os.path.exists(os.path.join(world.log_dir, "sglang_r1.log"))


def test_a_server_that_cannot_start_is_reported_with_its_error(world):
    def refuse(*a, **kw):
        raise OSError(errno.ENOEXEC, "Exec format error")
    world.spawn = refuse
    status, r = run(world, api_key=KEY)
    assert status == "failed" and "could not start" in r["msg"] and "Exec format error" in r["msg"], r
    assert state_of(world) is None


def test_keeping_a_healthy_server_of_an_older_run_reports_its_live_log_writer(world, stops):
    # A server started by an earlier eagle-deploy (its own log writer process) is kept as it is.
    parts = sglang_plan.fingerprint_parts(["/bin/true"], {}, [], {}, None)
    record_self_as_server(world, fingerprint=sglang_plan.fingerprint_of(parts), log_writer=sp.identity(os.getpid()))
    world.health = lambda t: 200
    status, r = run(world, argv=["/bin/true"])
    assert status == "ok" and not r["changed"] and r["log_writer_pid"] == os.getpid()
    assert world.supervisors == [] and stops == []


# ------------------------------------------------------------------ sglang_proc: the recorded log writer
# (run states of an eagle-deploy older than the supervisor: a host upgraded with such a server running stops it cleanly)
def test_log_writer_of_a_trusted_state_is_the_live_process_with_that_identity():
    me = sp.identity(os.getpid())
    state = dict(sp.identity(os.getpid()), log_writer=me)
    assert sp.log_writer_of(state) == os.getpid()
    assert sp.log_writer_of(dict(state, log_writer=dict(me, start_time=me["start_time"] + 1))) is None  # reused PID
    assert sp.log_writer_of(dict(state, log_writer=dict(me, cmdline=["other"]))) is None
    assert sp.log_writer_of(dict(state, log_writer=dict(me, pid=True))) is None
    assert sp.log_writer_of(dict(state, unverified=True)) is None
    assert sp.log_writer_of(dict(state, untrusted="no")) is None
    assert sp.log_writer_of(dict(state, log_writer=None)) is None


class FakeProcs(object):
    """A fake /proc for stop_tree: the server's processes die on SIGTERM; the log writer ignores it and ends
    ``writer_lag`` s after the last server process (or never)."""

    def __init__(self, monkeypatch, writer_lag):
        self.now = 0.0
        self.server = {500: 1, 501: 2}  # pid -> start_time
        self.writer = 600
        self.writer_alive = True
        self.writer_lag = writer_lag
        self.server_gone_at = None
        self.sent = []
        monkeypatch.setattr(sp, "why_not_ours", lambda state: None)
        monkeypatch.setattr(sp, "our_tree", lambda state, table=None: dict(
            (p, {"start_time": st}) for p, st in self.server.items()) if self.server else {})
        monkeypatch.setattr(sp, "orphans_of", lambda state, table=None: {})
        monkeypatch.setattr(sp, "dedicated_cgroup", lambda state: None)
        monkeypatch.setattr(sp, "pid_alive", self.alive)
        monkeypatch.setattr(sp, "proc_start_time", lambda pid: 9 if pid == self.writer else self.server.get(pid))
        monkeypatch.setattr(sp, "log_writer_of", lambda state: self.writer if self.alive(self.writer) else None)
        monkeypatch.setattr(sp.os, "kill", self.kill)
        # a fake /proc: its PIDs are no real processes, so no real pidfd may be opened (the os.kill path)
        monkeypatch.delattr(sp.signal, "pidfd_send_signal", raising=False)

    def alive(self, pid):
        if pid == self.writer:
            return self.writer_alive
        return pid in self.server

    def kill(self, pid, sig):
        self.sent.append((round(self.now, 2), pid, sig))
        if pid == self.writer and sig == signal.SIGKILL:
            self.writer_alive = False
        elif pid in self.server and sig in (signal.SIGTERM, signal.SIGKILL):
            del self.server[pid]
            if not self.server:
                self.server_gone_at = self.now

    def clock(self):
        return self.now

    def sleep(self, dt):
        self.now += dt
        if self.server_gone_at is not None and self.writer_lag is not None and \
                self.now >= self.server_gone_at + self.writer_lag:
            self.writer_alive = False


def test_stop_tree_never_sigterms_the_log_writer_and_lets_it_end_by_itself(monkeypatch):
    f = FakeProcs(monkeypatch, writer_lag=0.3)
    r = sp.stop_tree({"pid": 500}, grace=10, clock=f.clock, sleep=f.sleep)
    assert sorted(r["signalled"]) == [500, 501] and r["killed"] == [] and r["remaining"] == []
    assert not [s for s in f.sent if s[1] == f.writer]
    assert not f.writer_alive


def test_stop_tree_sigkills_a_log_writer_that_outlives_the_server_by_the_drain_time(monkeypatch):
    f = FakeProcs(monkeypatch, writer_lag=None)
    r = sp.stop_tree({"pid": 500}, grace=10, clock=f.clock, sleep=f.sleep)
    assert r["killed"] == [f.writer] and r["remaining"] == []
    kill_at = [t for t, pid, sig in f.sent if pid == f.writer]
    assert kill_at == [pytest.approx(f.server_gone_at + sp.WRITER_DRAIN, abs=0.2)]


def test_stop_tree_ends_a_log_writer_left_alone(monkeypatch):
    f = FakeProcs(monkeypatch, writer_lag=None)
    f.server = {}
    r = sp.stop_tree({"pid": 500}, grace=10, clock=f.clock, sleep=f.sleep)
    assert r["signalled"] == [] and r["killed"] == [f.writer]


# ------------------------------------------------------------------ a stop waits for the detached supervisor's end
class FakeSupervisorProc(object):
    """A fake /proc for sglang_launch.Supervisors: the supervisor (PID 700) ends ``lag`` s after the test starts (None: never,
    until SIGKILL); a fake clock."""

    def __init__(self, monkeypatch, lag):
        self.now, self.lag, self.alive, self.kills = 0.0, lag, True, []
        ident = {"pid": 700, "start_time": 77, "cmdline": ["python3", "-I", "sglang_watcher.py", "/run", "sglang"]}
        self.state = {"pid": 500, "watcher": ident}
        monkeypatch.setattr(sp, "pid_alive", lambda pid: pid == 700 and self.alive)
        monkeypatch.setattr(sp, "proc_start_time", lambda pid: 77 if pid == 700 else None)
        monkeypatch.setattr(sp, "proc_cmdline", lambda pid: ident["cmdline"] if pid == 700 else None)
        monkeypatch.setattr(sp, "signal_verified", self.kill)

    def kill(self, pid, start_time, sig):
        self.kills.append((round(self.now, 2), pid, start_time, sig))
        self.alive = False
        return True

    def clock(self):
        return self.now

    def sleep(self, dt):
        self.now += dt
        if self.lag is not None and self.now >= self.lag:
            self.alive = False


def test_a_stop_waits_for_the_supervisor_to_end_by_itself(monkeypatch):
    f = FakeSupervisorProc(monkeypatch, lag=0.6)
    assert sglang_launch.Supervisors().wait_gone(f.state, grace=5.0, clock=f.clock, sleep=f.sleep) is None
    assert f.kills == [] and 0.6 <= f.now < 0.7  # it returned when the supervisor was gone, not before


def test_a_stop_sigkills_a_supervisor_that_does_not_end_within_the_grace(monkeypatch):
    f = FakeSupervisorProc(monkeypatch, lag=None)
    assert sglang_launch.Supervisors().wait_gone(f.state, grace=5.0, clock=f.clock, sleep=f.sleep) == 700
    assert f.kills == [(pytest.approx(5.0, abs=0.06), 700, 77, signal.SIGKILL)]  # its verified identity only
