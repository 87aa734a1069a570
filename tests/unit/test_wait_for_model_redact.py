"""wait_for_model with secrets: the server's output goes through the log writer, which is recorded in the run
state and ended last by stop_tree. Fake world (tests/unit/module_harness.py) and a fake /proc for stop_tree:
no process is spawned or signalled. The real log writer on real SGLang-shaped output: tests/integration."""
from __future__ import annotations

import errno
import json
import os
import signal

import pytest

from ansible.module_utils import sglang_proc as sp
from ansible.module_utils.common.warnings import get_warning_messages

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


def test_no_secret_no_log_writer_the_server_writes_the_file(world):
    status, r = run(world)
    assert status == "ok" and world.writers == []
    assert "log_writer" not in state_of(world) and "log_writer_pid" not in r


def test_api_key_output_goes_through_the_log_writer(world):
    status, r = run(world, api_key=KEY, run_as=None)
    assert status == "ok"
    assert len(world.writers) == 1 and world.writers[0]["secrets"] == [KEY]
    assert world.writers[0]["label"] == "eagle-deploy-log-writer:sglang"
    # The server writes into the writer's pipe, not into the log file.
    assert world.spawned[0]["log_fd"] == world.writers[0]["server_out"]
    state = state_of(world)
    assert state["pid"] == r["pid"] != r["log_writer_pid"]  # the leader stays the server
    assert state["log_writer"]["pid"] == r["log_writer_pid"]
    assert state["log_writer"]["cmdline"][:4] == ["python3", "-I", "-S", "-c"]
    assert KEY not in json.dumps(state)


def test_every_secret_is_handed_to_the_log_writer_and_a_short_redact_string_is_warned_about(world):
    status, r = run(world, api_key=KEY, secret_environment={"HF_TOKEN": "hf_abcdef", "EMPTY": ""},
                    redact=["extra-secret", KEY, "ab"])
    assert status == "ok"
    assert world.writers[0]["secrets"] == [KEY, "hf_abcdef", "extra-secret"]
    warnings = get_warning_messages()
    assert any("redact[2] is shorter than 4 characters" in w for w in warnings)
    assert not any("hf_abcdef" in w or KEY in w for w in warnings)


@pytest.mark.parametrize("key", ["abc", "s3cret-key", "x" * 15])
def test_an_api_key_shorter_than_16_characters_is_refused_before_anything_is_stopped(world, stops, key):  # noqa: F811
    status, r = run(world, api_key=KEY)
    assert status == "ok"
    pid = r["pid"]
    spawned = len(world.spawned)
    status, r = run(world, api_key=key, force_restart=True)
    assert status == "failed"
    assert "api_key is %d characters long, shorter than 16" % len(key) in r["msg"]
    assert "openssl rand -hex 24" in r["msg"] and "Nothing was stopped or launched" in r["msg"]
    assert key not in json.dumps(r)
    assert stops == [] and len(world.spawned) == spawned and state_of(world)["pid"] == pid
    status, r = run(world, api_key=key, state="watched", watch_time=0)  # a watch asks health with the key: refused
    assert status == "failed" and "shorter than 16" in r["msg"]
    status, r = run(world, api_key=key, state="stopped")  # a stop does not use the key: an old deployment stops
    assert status == "ok" and r["changed"] and stops == [pid]


def test_a_secret_environment_value_too_short_to_mask_is_refused_before_anything_is_stopped(world, stops):  # noqa: F811
    status, r = run(world, api_key=KEY)
    assert status == "ok"
    spawned = len(world.spawned)
    status, r = run(world, api_key=KEY, secret_environment={"HF_TOKEN": "hf_abcdef", "FLAG": "1", "PIN": "x9z"})
    assert status == "failed"
    assert "secret_environment FLAG is 1 characters long, shorter than 4: refused" in r["msg"]
    assert "put it in environment" in r["msg"] and "Nothing was stopped or launched" in r["msg"]
    assert "x9z" not in json.dumps(r) and "hf_abcdef" not in json.dumps(r)
    assert stops == [] and len(world.spawned) == spawned


def test_the_redact_list_is_part_of_the_fingerprint_by_hash():
    plain = wfm.fingerprint_parts(["/bin/true"], {}, [], {}, None)
    more = wfm.fingerprint_parts(["/bin/true"], {}, [], {}, None, redact=["another-secret"])
    assert "redact" not in plain  # no list: the fingerprint of a server without one is unchanged
    assert wfm.describe_change(plain, more) == "fingerprint changed: redact"
    assert "another-secret" not in json.dumps(more)


def test_a_log_writer_that_cannot_start_starts_nothing(world):
    def refuse(*a, **kw):
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
    world.spawn_log_writer = refuse
    status, r = run(world, api_key=KEY)
    assert status == "failed" and "could not start the log writer" in r["msg"]
    assert world.spawned == [] and state_of(world) is None
    assert not os.path.exists(os.path.join(world.log_dir, "sglang_r1.log"))


def test_a_server_that_cannot_start_ends_its_log_writer(world):
    def refuse(*a, **kw):
        raise OSError(errno.ENOEXEC, "Exec format error")
    world.spawn = refuse
    status, r = run(world, api_key=KEY)
    assert status == "failed" and "could not start" in r["msg"] and "log writer" not in r["msg"]
    assert world.reaped == [4100001] and state_of(world) is None


def test_an_unrecordable_launch_kills_the_server_and_ends_its_log_writer(world, monkeypatch):
    def no_state(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(sp, "write_state", no_state)
    status, r = run(world, api_key=KEY)
    assert status == "failed" and world.killed == [4000001] and world.reaped == [4100001]


def test_keeping_a_healthy_server_reports_its_live_log_writer(world, stops):
    parts = wfm.fingerprint_parts(["/bin/true"], {}, [], {}, None)
    record_self_as_server(world, fingerprint=wfm.fingerprint_of(parts), log_writer=sp.identity(os.getpid()))
    world.health = lambda t: 200
    status, r = run(world, argv=["/bin/true"], api_key=KEY)
    assert status == "ok" and not r["changed"] and r["log_writer_pid"] == os.getpid()
    assert world.writers == [] and stops == []


# ------------------------------------------------------------------ sglang_proc: the recorded log writer
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
