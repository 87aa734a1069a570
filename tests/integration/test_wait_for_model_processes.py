"""wait_for_model against real processes (the fake world of tests/unit/module_harness.py for clock, launch and
HTTP): a stop really ends our tree and only ours, and a reused PID is never signalled.

Each sleeper prints a line once it runs its own command line, so the test knows exec is done without a loop."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from ansible.module_utils import sglang_proc

from ansible.module_utils import sglang_plan
import wait_for_model as wfm
from module_harness import module_exits, run, world  # noqa: F401 - fixtures

pytestmark = pytest.mark.usefixtures("module_exits")
SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
SIGNALLED = (-signal.SIGTERM, -signal.SIGKILL)  # the grace runs on the fake clock: SIGKILL may come first


@pytest.fixture
def sleepers():
    """start(new_session) -> a running SLEEPER past its exec; all are killed at teardown."""
    started = []

    def start(new_session=True):
        proc = subprocess.Popen(SLEEPER, start_new_session=new_session, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout.readline() == "up\n"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def record(world, proc, **extra):
    """Record a live process as our server, with the fingerprint of SLEEPER."""
    parts = sglang_plan.fingerprint_parts(SLEEPER, {}, [], {}, None)
    state = dict(sglang_proc.identity(proc.pid), fingerprint=sglang_plan.fingerprint_of(parts), fingerprint_parts=parts,
                 attempt=1, log_path=os.path.join(world.log_dir, "sglang_r1.log"))
    state.update(extra)
    open(state["log_path"], "w").close()
    sglang_proc.write_state(world.log_dir, "sglang", state)
    return state


def test_fingerprint_changed_restart_ends_the_old_tree(world, sleepers):
    old = sleepers()
    record(world, old)
    world.health = lambda t: 200
    status, r = run(world, argv=SLEEPER + ["--changed"], stop_timeout=5)
    assert status == "ok" and r["restart_reason"] == "fingerprint changed: argv"
    assert old.pid in r["stopped"]["signalled"]
    assert old.wait(timeout=10) in SIGNALLED
    assert r["attempt"] == 2


def test_stopped_stops_only_our_tree(world, sleepers):
    ours = sleepers()
    bystander = sleepers(new_session=False)
    record(world, ours)
    status, r = run(world, state="stopped", stop_timeout=5)
    assert status == "ok" and r["changed"] is True
    assert ours.wait(timeout=10) in SIGNALLED
    assert bystander.poll() is None
    assert not os.path.exists(os.path.join(world.log_dir, "sglang.json"))


def test_reused_pid_in_stale_pidfile_is_never_signalled(world, sleepers):
    # Our recorded server died; its PID now belongs to an unrelated process (same PID, other start time
    # and command line): recorded here as a live foreign process with a wrong start time.
    foreign = sleepers()
    record(world, foreign, start_time=sglang_proc.proc_start_time(foreign.pid) - 1000,
           cmdline=["/opt/sglang/bin/python", "-m", "sglang.launch_server"])
    world.health = lambda t: 200
    status, r = run(world)
    assert status == "failed"
    assert "not the server we launched" in r["msg"] and "pidfile" in r["msg"]
    assert world.spawned == [] and foreign.poll() is None
    # With on_foreign_pid=ignore the stale record is discarded, the foreign process still untouched.
    status, r = run(world, on_foreign_pid="ignore")
    assert status == "ok" and "reused" in r["stale_state"]
    assert foreign.poll() is None
    status, r = run(world, state="stopped", on_foreign_pid="ignore")
    assert foreign.poll() is None
