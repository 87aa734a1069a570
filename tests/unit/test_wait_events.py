"""Watch.pause on events (sglang_verdict.Waker): how long a pause may last and what it watches, on a fake clock with an
injected waker that records instead of blocking; and the Waker's own bookkeeping on descriptors that are already
ready (a wait of 0 s: nothing blocks). Real processes, real exits and real timings: tests/integration/test_wait_events.py.
"""
from __future__ import annotations

import errno
import os

import pytest

from ansible.module_utils import sglang_proc, sglang_verdict
from ansible.module_utils.sglang_log import LogClassifier

T0 = 1000.0
SETTINGS = {"settle_time": 0.3, "child_grace": 2.0, "health_interval": 0.25, "health_timeout": 10,
            "unhealthy_after": 3, "stall_timeout": 900, "poll_interval": 0.1}


class Clock(object):
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now

    def sleep(self, dt):
        self.now += dt


class Follower(object):
    """A log that is as long as what was read of it."""

    def __init__(self, path):
        self.path, self.offset, self.pending = path, 0, b""

    def read(self):
        data, self.pending = self.pending, b""
        self.offset += len(data)
        return data


class Procs(object):
    """The leader 4242 (start time 77) with one worker child 4243; counts how often the children were listed."""

    def __init__(self):
        self.kids = {4243: 78}
        self.listed = 0

    def children(self, pid):
        self.listed += 1
        return dict(self.kids)

    def alive(self, pid):
        return True

    def start_time(self, pid):
        return 77

    def cmdline(self, pid):
        return ["python", "-c", "from multiprocessing.spawn import spawn_main"] if pid != 4242 else ["python", "srv"]


class FakeWaker(object):
    """Records what a pause arms and how long it would wait; ends each wait with the next scripted reasons (advancing
    the clock by the wait, as a wait that ran out would, when the reasons are empty)."""

    def __init__(self, clock, complete=True, script=()):
        self.clock, self.complete, self.script = clock, complete, list(script)
        self.armed, self.waits, self.closed = [], [], False

    def arm(self, processes, log_path, log_behind=False, health_done=False):
        self.armed.append((dict(processes), log_path, log_behind, health_done))
        return self.complete

    def wait(self, seconds):
        self.waits.append(round(seconds, 6))
        why = set(self.script.pop(0)) if self.script else set()
        if not why:
            self.clock.now += seconds
        return why

    def poke(self):
        pass

    def close(self):
        self.closed = True


def make_watch(tmp_path, clock, waker, health=lambda timeout: None, deadline=600.0, settings=None, watching=False,
               handle=None):
    path = str(tmp_path / "srv.log")
    open(path, "wb").close()
    asked = []

    def ask(timeout):
        asked.append(clock())
        return health(timeout)

    procs = Procs()
    w = sglang_verdict.Watch(Follower(path), LogClassifier(clock=lambda: clock() - T0), T0, T0 + deadline, clock, handle,
                           4242, procs, 77, ask, False, dict(SETTINGS, **(settings or {})), watching=watching,
                           waker=waker)
    return w, procs, asked


def test_with_every_source_watched_a_silent_server_is_looked_at_once_a_second_at_most(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock)
    w, _procs, _ = make_watch(tmp_path, clock, waker, settings={"health_interval": 30})
    w.look(clock())  # sends the first request (answered at once: InlineAsk)
    w.pause(0.1, clock.sleep, True)
    assert waker.waits == [sglang_verdict.EVENT_WAIT] and clock.now == T0 + sglang_verdict.EVENT_WAIT
    processes, log_path, behind, health_done = waker.armed[0]
    assert processes == {(4242, 77): None, (4243, 78): None}  # attached leader: verified by its start time
    assert log_path == str(tmp_path / "srv.log") and behind is False and health_done is False


def test_a_pause_ends_at_the_next_health_request_and_sends_it_without_a_look(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock, script=[(), ("health",)])
    w, procs, asked = make_watch(tmp_path, clock, waker)
    w.look(clock())
    assert asked == [T0]
    w.pause(0.1, clock.sleep, True)
    # its time was up at the next request (0.25 s): the pause sent it itself and waited on for the answer
    assert waker.waits[0] == pytest.approx(0.25) and asked == [T0, pytest.approx(T0 + 0.25)]
    assert waker.waits[1] == pytest.approx(sglang_verdict.EVENT_WAIT - 0.25)
    assert w.health.sent == pytest.approx(T0 + 0.25)
    w.look(clock())  # the look reads that answer
    assert w.health.sent is None and w.health.polls == 2


def test_a_pause_never_runs_past_the_deadline_or_the_callers_own_time(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock)
    w, _procs, _ = make_watch(tmp_path, clock, waker, deadline=0.3, settings={"health_interval": 30})
    w.look(clock())
    w.pause(0.1, clock.sleep, True)
    assert waker.waits == [pytest.approx(0.3)]
    clock.now = T0
    w.look(clock())
    w.pause(0.1, clock.sleep, True, until=T0 + 0.05)  # the end of a step
    assert waker.waits[-1] == pytest.approx(0.05)


def test_the_stall_check_is_due_when_nothing_answered_for_stall_timeout(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock)
    w, _procs, _ = make_watch(tmp_path, clock, waker, settings={"health_interval": 30, "stall_timeout": 2})
    clock.now = T0 + 1.5
    w.look(clock())
    w.pause(0.1, clock.sleep, True)
    assert waker.waits == [pytest.approx(0.5)]


def test_a_watch_past_its_deadline_does_not_spin(tmp_path):
    """A watch whose log shows a crash runs past its deadline until health answers: a due time already looked at
    is no reason to wait 0 s."""
    clock = Clock()
    waker = FakeWaker(clock)
    w, _procs, _ = make_watch(tmp_path, clock, waker, deadline=1.0, watching=True,
                              settings={"health_interval": 30, "health_timeout": 10})
    clock.now = T0 + 5.0
    w.look(clock())
    w.health.sent = clock()  # a request under way (a slow server)
    w.pause(0.1, clock.sleep, True)
    assert waker.waits == [sglang_verdict.EVENT_WAIT]


def test_where_a_source_cannot_be_watched_the_pause_is_the_poll_interval(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock, complete=False)
    w, _procs, _ = make_watch(tmp_path, clock, waker, settings={"health_interval": 30})
    w.look(clock())
    w.pause(0.1, clock.sleep, True)
    assert waker.waits == [pytest.approx(0.1)] and w.woken_by is None


def test_the_fake_clock_keeps_the_injected_sleep_and_never_arms_a_waker(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock)
    w, _procs, _ = make_watch(tmp_path, clock, waker)
    w.look(clock())
    slept = []
    w.pause(0.1, slept.append, False)
    assert slept == [0.1] and waker.armed == [] and waker.waits == []


def test_events_off_keeps_the_timed_poll(tmp_path):
    clock = Clock()
    path = str(tmp_path / "srv.log")
    open(path, "wb").close()
    w = sglang_verdict.Watch(Follower(path), LogClassifier(), T0, T0 + 60, clock, None, 4242, Procs(), 77,
                           lambda t: None, False, SETTINGS, events=False)
    slept = []
    w.pause(0.1, slept.append, True)
    assert slept == [0.1] and w.waker is None


def test_log_bytes_the_last_look_did_not_read_end_the_pause_at_once(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock)
    w, _procs, _ = make_watch(tmp_path, clock, waker)
    w.look(clock())
    with open(str(tmp_path / "srv.log"), "ab") as fh:
        fh.write(b"written after the look\n")
    w.pause(0.1, clock.sleep, True)
    assert waker.armed[0][2] is True  # log_behind


def test_a_leader_we_launched_is_watched_without_a_start_time_check(tmp_path):
    class Handle(object):
        pid = 4242

        def poll(self):
            return None

    clock = Clock()
    waker = FakeWaker(clock)
    w, _procs, _ = make_watch(tmp_path, clock, waker, handle=Handle())
    w.look(clock())
    w.pause(0.1, clock.sleep, True)
    assert (4242, None) in waker.armed[0][0]


@pytest.mark.parametrize("woken_by, after, listed", [
    (("log",), 0.05, False),  # the log woke it, children listed 50 ms ago: they wait
    (("health",), 0.05, False),
    (("log", "process"), 0.05, True),  # a process exited: list them now
    ((), 0.05, True),  # the time was up
    (("log",), 0.1, True),  # a poll interval since they were listed
])
def test_a_look_woken_by_the_log_lists_the_children_no_more_often_than_the_poll(tmp_path, woken_by, after, listed):
    clock = Clock()
    waker = FakeWaker(clock, script=[woken_by])
    w, procs, _ = make_watch(tmp_path, clock, waker, settings={"health_interval": 30})
    w.look(clock())
    assert procs.listed == 1
    w.pause(0.1, clock.sleep, True)
    clock.now = T0 + after
    w.look(clock())
    assert procs.listed == (2 if listed else 1)


def test_a_dead_worker_is_seen_by_the_look_its_pidfd_woke(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock, script=[("process",)])
    w, procs, _ = make_watch(tmp_path, clock, waker, settings={"health_interval": 30})
    w.look(clock())
    w.pause(0.1, clock.sleep, True)
    del procs.kids[4243]
    clock.now += 0.001
    assert w.look(clock()) == "child_died"


def test_close_lets_go_of_the_waker(tmp_path):
    clock = Clock()
    waker = FakeWaker(clock)
    w, _procs, _ = make_watch(tmp_path, clock, waker)
    w.close()
    assert waker.closed and w.waker is False
    slept = []
    w.pause(0.1, slept.append, True)  # after close: the timed poll
    assert slept == [0.1]


# ---------------------------------------------------------------------------- the Waker's bookkeeping (no blocking)
def test_a_poke_ends_a_wait_and_counts_as_health():
    waker = sglang_verdict.Waker(pidfd_open=lambda pid: (_ for _ in ()).throw(OSError(errno.ENOSYS, "no")))
    try:
        assert waker.wait(0) == set()
        waker.poke()
        assert waker.wait(0) == {"health"}
        assert waker.wait(0) == set()  # drained
    finally:
        waker.close()
    waker.poke()  # a late answer after close is a no-op


def test_without_pidfds_the_waker_is_not_complete():
    def no_pidfd(pid):
        raise OSError(errno.ENOSYS, "Function not implemented")

    waker = sglang_verdict.Waker(pidfd_open=no_pidfd)
    try:
        assert waker.arm({(os.getpid(), None): None}, __file__) is False
    finally:
        waker.close()


def test_without_inotify_the_waker_is_not_complete(monkeypatch):
    monkeypatch.setattr(sglang_verdict, "_inotify_libc", lambda: None)
    waker = sglang_verdict.Waker(pidfd_open=os.pidfd_open)
    try:
        assert waker.ino is None and waker.arm({}, __file__) is False
    finally:
        waker.close()


def test_a_process_gone_before_it_is_watched_ends_the_next_wait_once():
    calls = []

    def gone(pid):
        calls.append(pid)
        raise ProcessLookupError(errno.ESRCH, "No such process")

    waker = sglang_verdict.Waker(pidfd_open=gone)
    try:
        waker.arm({(4000001, 5): None}, __file__)
        assert waker.wait(30) == {"process"}  # at once: the next look sees the exit
        waker.arm({(4000001, 5): None}, __file__)
        assert calls == [4000001] and waker.wait(0) == set()  # asked once, never again: no spin
    finally:
        waker.close()


def test_a_process_of_another_start_time_is_not_watched(monkeypatch):
    """The pidfd is opened first and the start time checked after: another process at that PID is no ours."""
    monkeypatch.setattr(sglang_proc, "proc_start_time", lambda pid: 12345)
    waker = sglang_verdict.Waker()
    try:
        waker.arm({(os.getpid(), 777): None}, __file__)
        assert waker.pidfds == {} and waker.wait(0) == {"process"}
    finally:
        waker.close()


def test_a_live_process_is_watched_through_its_pidfd_and_forgotten_when_no_longer_asked_for():
    waker = sglang_verdict.Waker()
    me = (os.getpid(), sglang_proc.proc_start_time(os.getpid()))
    try:
        assert waker.arm({me: None}, __file__) is True
        fd = waker.pidfds[me]
        assert "Pid:\t%d" % os.getpid() in open("/proc/self/fdinfo/%d" % fd).read()
        assert waker.wait(0) == set()  # alive: not readable
        waker.arm({}, __file__)
        assert waker.pidfds == {}
        with pytest.raises(OSError):
            os.fstat(fd)  # closed
    finally:
        waker.close()


def test_a_write_to_the_log_ends_the_wait_and_an_older_one_does_not(tmp_path):
    path = str(tmp_path / "srv.log")
    with open(path, "wb") as fh:
        fh.write(b"before\n")
    waker = sglang_verdict.Waker()
    try:
        assert waker.arm({}, path) is True
        with open(path, "ab") as fh:
            fh.write(b"line\n")
        assert waker.wait(0) == {"log"}
        with open(path, "ab") as fh:
            fh.write(b"read by a look\n")
        waker.arm({}, path)  # what was written before the arm is the look's (log_behind), not a wake
        assert waker.wait(0) == set()
        fd = os.open(path, os.O_RDONLY)
        try:
            assert waker.arm({}, "/proc/self/fd/%d" % fd) is True  # through a descriptor: the same inode
            with open(path, "ab") as fh:
                fh.write(b"more\n")
            assert waker.wait(0) == {"log"}
        finally:
            os.close(fd)
    finally:
        waker.close()


def test_a_log_that_does_not_exist_yet_is_the_timed_poll(tmp_path):
    waker = sglang_verdict.Waker()
    try:
        assert waker.arm({}, str(tmp_path / "later.log")) is False
    finally:
        waker.close()
