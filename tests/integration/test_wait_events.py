"""Watch.pause on events with real processes (sglang_verdict.Waker): the leader's exit, a worker's exit, a log line and
a health answer each end a pause within a few ms instead of at its time; where pidfds are missing the pause is the
poll interval. And signal_verified / stop_tree signal through pidfds, which never reach a process that is gone.

Bounds are loose for a busy 2-core machine (a wake within 50 ms of a pause of 1 s); each test prints nothing and
needs no network beyond loopback."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ansible.module_utils import sglang_proc, sglang_verdict
from ansible.module_utils.sglang_log import LogClassifier, LogFollower

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
# a leader with one long-lived worker child (a multiprocessing-spawn-like command line): prints the child's PID once
# the child runs its own command line (it prints "up"; right after exec /proc/PID/cmdline may still be empty)
PARENT = [sys.executable, "-c", (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; print(\"up\", flush=True); time.sleep(60)',\n"
    "                      '--multiprocessing-fork'], stdout=subprocess.PIPE, text=True)\n"
    "assert c.stdout.readline() == 'up\\n'\n"
    "print(c.pid, flush=True)\n"
    "time.sleep(60)\n")]
SETTINGS = {"settle_time": 0.3, "child_grace": 2.0, "health_interval": 30, "health_timeout": 10,
            "unhealthy_after": 3, "stall_timeout": 0, "poll_interval": 0.1}
LATE = 0.05  # s: a wake later than this after the event is a failure (a pause lasts up to 1 s)


@pytest.fixture
def procs():
    started = []

    def start(argv=SLEEPER):
        proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                text=True)
        started.append(proc)
        first = proc.stdout.readline()
        return proc, first

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        proc.stdout.close()


def watch_of(tmp_path, proc, ask=lambda timeout: None, background=False, waker=None, settings=None):
    path = str(tmp_path / "srv.log")
    open(path, "ab").close()
    fd = os.open(path, os.O_RDONLY)
    follower = LogFollower("/proc/self/fd/%d" % fd)
    t0 = time.monotonic()
    w = sglang_verdict.Watch(follower, LogClassifier(clock=lambda: time.monotonic() - t0), t0, t0 + 120,
                           time.monotonic, proc, proc.pid, sglang_verdict.ProcView(), sglang_proc.proc_start_time(proc.pid),
                           ask, background, dict(SETTINGS, **(settings or {})), waker=waker)
    return w, path, fd


def at(delay, action):
    """Run ``action`` in ``delay`` s in a thread; returns a dict that gets the monotonic time it ran."""
    out = {}

    def run():
        time.sleep(delay)
        out["at"] = time.monotonic()
        action()

    threading.Thread(target=run, daemon=True).start()
    return out


def timed_pause(w):
    t = time.monotonic()
    w.pause(0.1, time.sleep, True)
    return t, time.monotonic()


def test_the_leaders_exit_ends_the_pause_within_a_few_ms(tmp_path, procs):
    proc, _ = procs()
    w, _path, fd = watch_of(tmp_path, proc)
    try:
        assert w.look(time.monotonic()) is None
        event = at(0.3, lambda: os.kill(proc.pid, signal.SIGKILL))
        start, end = timed_pause(w)
        assert end - event["at"] < LATE, end - event["at"]
        assert 0.25 < end - start < 0.9  # it waited, and ended on the exit, not at its 1 s
        assert w.woken_by == {"process"}
        assert w.look(time.monotonic()) == "exited"
    finally:
        w.close()
        os.close(fd)


def test_a_workers_exit_ends_the_pause_and_is_child_died(tmp_path, procs):
    proc, first = procs(PARENT)
    worker = int(first)
    w, _path, fd = watch_of(tmp_path, proc)
    try:
        assert w.look(time.monotonic()) is None
        assert worker in w.children.seen
        event = at(0.3, lambda: os.kill(worker, signal.SIGKILL))
        _start, end = timed_pause(w)
        assert end - event["at"] < LATE, end - event["at"]
        assert w.woken_by == {"process"}
        assert w.look(time.monotonic()) == "child_died" and w.children.died[0] == worker
    finally:
        w.close()
        os.close(fd)


def test_a_log_line_ends_the_pause_within_a_few_ms(tmp_path, procs):
    proc, _ = procs()
    w, path, fd = watch_of(tmp_path, proc)

    def write():
        with open(path, "ab") as fh:
            fh.write(b"[2026-01-01 00:00:00] The server is fired up and ready to roll!\n")

    try:
        assert w.look(time.monotonic()) is None
        event = at(0.3, write)
        start, end = timed_pause(w)
        assert end - event["at"] < LATE, end - event["at"]
        assert 0.25 < end - start and w.woken_by == {"log"}
        w.look(time.monotonic())
        assert w.log.clf.phase == "ready"
    finally:
        w.close()
        os.close(fd)


def test_a_health_answer_ends_the_pause_within_a_few_ms(tmp_path, procs):
    proc, _ = procs()
    gate = threading.Event()

    def ask(timeout):
        gate.wait(5)
        return 200

    w, _path, fd = watch_of(tmp_path, proc, ask=ask, background=True)
    try:
        assert w.look(time.monotonic()) is None and w.health.sent is not None  # the first request is under way
        event = at(0.3, gate.set)
        _start, end = timed_pause(w)
        assert end - event["at"] < LATE, end - event["at"]
        assert w.woken_by == {"health"}
        assert w.look(time.monotonic()) == "ready"
    finally:
        w.close()
        os.close(fd)


def test_a_silent_server_is_looked_at_about_once_a_second(tmp_path, procs):
    proc, _ = procs()
    w, _path, fd = watch_of(tmp_path, proc)
    try:
        w.look(time.monotonic())
        start, end = timed_pause(w)
        assert 0.95 <= end - start < 1.3 and w.woken_by == set()
    finally:
        w.close()
        os.close(fd)


def test_without_pidfds_the_pause_is_the_poll_interval(tmp_path, procs):
    def no_pidfd(pid):
        raise OSError(errno.ENOSYS, "Function not implemented")

    proc, _ = procs()
    w, _path, fd = watch_of(tmp_path, proc, waker=sglang_verdict.Waker(pidfd_open=no_pidfd))
    try:
        w.look(time.monotonic())
        start, end = timed_pause(w)
        assert 0.09 <= end - start < 0.3 and w.woken_by is None
    finally:
        w.close()
        os.close(fd)


# ---------------------------------------------------------------------------- signalling through pidfds
def test_signal_verified_ends_a_real_process_through_its_pidfd(procs, monkeypatch):
    proc, _ = procs()
    sent = []
    real = signal.pidfd_send_signal

    def spy(fd, sig, *args):
        sent.append(sig)
        return real(fd, sig, *args)

    monkeypatch.setattr(signal, "pidfd_send_signal", spy)
    assert sglang_proc.signal_verified(proc.pid, sglang_proc.proc_start_time(proc.pid), signal.SIGTERM) is True
    assert proc.wait(timeout=10) == -signal.SIGTERM and sent == [signal.SIGTERM]


def test_a_pidfd_never_reaches_a_process_that_is_gone(procs):
    """What makes the check-then-signal safe: the descriptor names the process it was opened for. Once that one is
    gone (reaped: its PID free for anyone), signalling through it fails instead of hitting whoever has the PID."""
    proc, _ = procs()
    fd = sglang_proc.open_pidfd(proc.pid, sglang_proc.proc_start_time(proc.pid))
    try:
        proc.kill()
        proc.wait()
        with pytest.raises(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGTERM)
    finally:
        os.close(fd)


def test_a_wrong_start_time_leaves_the_process_alone(procs):
    proc, _ = procs()
    assert sglang_proc.signal_verified(proc.pid, sglang_proc.proc_start_time(proc.pid) + 1, signal.SIGKILL) is False
    time.sleep(0.05)
    assert proc.poll() is None


def test_stop_tree_signals_the_tree_through_pidfds(procs, monkeypatch):
    proc, first = procs(PARENT)
    worker = int(first)
    state = dict(sglang_proc.identity(proc.pid))
    sent = []
    real = signal.pidfd_send_signal

    def spy(fd, sig, *args):
        sent.append(sig)
        return real(fd, sig, *args)

    monkeypatch.setattr(signal, "pidfd_send_signal", spy)
    kills = []
    monkeypatch.setattr(sglang_proc.os, "kill", lambda pid, sig: kills.append((pid, sig)))
    r = sglang_proc.stop_tree(state, grace=5)
    assert sorted(r["signalled"]) == sorted([proc.pid, worker]) and r["remaining"] == []
    assert sent.count(signal.SIGTERM) == 2 and kills == []
    assert proc.wait(timeout=10) == -signal.SIGTERM
