"""sglang_proc.signal_verified: a verified PID is signalled through a pidfd opened before its identity is checked, and
through os.kill only where pidfds are missing. The senders are injected recorders: nothing is signalled; the one real
pidfd opened is this test process's own (no process is spawned). Real processes: tests/integration/test_wait_events.py.
"""
from __future__ import annotations

import errno
import os
import signal

import pytest

from ansible.module_utils import sglang_proc as sp

ME = os.getpid()


def my_start():
    return sp.proc_start_time(ME)


class Recorder(object):
    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def __call__(self, target, sig):
        self.calls.append((target, sig))
        if self.fail is not None:
            raise self.fail


def open_fds():
    return set(os.listdir("/proc/self/fd"))


def test_a_verified_pid_is_signalled_through_its_pidfd_not_by_number():
    seen = []

    def sender(fd, sig):
        seen.append((open("/proc/self/fdinfo/%d" % fd).read(), sig))

    kill = Recorder()
    before = open_fds()
    assert sp.signal_verified(ME, my_start(), signal.SIGUSR1, opener=os.pidfd_open, sender=sender, kill=kill) is True
    assert len(seen) == 1 and "Pid:\t%d\n" % ME in seen[0][0] and seen[0][1] == signal.SIGUSR1
    assert kill.calls == [] and open_fds() == before  # the pidfd is closed again


def test_the_pidfd_is_opened_before_the_identity_is_checked(monkeypatch):
    order = []
    real_start = sp.proc_start_time

    def opener(pid):
        order.append("open")
        return os.pidfd_open(pid)

    def start_time(pid):
        order.append("check")
        return real_start(pid)

    start = my_start()
    monkeypatch.setattr(sp, "proc_start_time", start_time)
    assert sp.signal_verified(ME, start, signal.SIGUSR1, opener=opener, sender=Recorder(), kill=Recorder())
    assert order == ["open", "check"]


@pytest.mark.parametrize("use_pidfd", [True, False])
def test_another_process_at_that_pid_is_never_signalled(use_pidfd):
    sender, kill = Recorder(), Recorder()

    def no_pidfd(pid):
        raise OSError(errno.ENOSYS, "Function not implemented")

    before = open_fds()
    assert sp.signal_verified(ME, my_start() + 1, signal.SIGTERM, opener=os.pidfd_open if use_pidfd else no_pidfd,
                              sender=sender, kill=kill) is False
    assert sender.calls == [] and kill.calls == [] and open_fds() == before


def test_without_pidfd_open_the_checked_pid_is_signalled_with_kill():
    def no_pidfd(pid):
        raise OSError(errno.ENOSYS, "Function not implemented")

    sender, kill = Recorder(), Recorder()
    assert sp.signal_verified(ME, my_start(), signal.SIGUSR1, opener=no_pidfd, sender=sender, kill=kill) is True
    assert sender.calls == [] and kill.calls == [(ME, signal.SIGUSR1)]


def test_without_pidfd_send_signal_the_checked_pid_is_signalled_with_kill(monkeypatch):
    monkeypatch.delattr(sp.signal, "pidfd_send_signal", raising=False)
    opened, kill = [], Recorder()
    assert sp.signal_verified(ME, my_start(), signal.SIGUSR1, opener=opened.append, kill=kill) is True
    assert opened == [] and kill.calls == [(ME, signal.SIGUSR1)]


def test_a_pid_gone_before_its_pidfd_is_not_signalled():
    def gone(pid):
        raise ProcessLookupError(errno.ESRCH, "No such process")

    sender, kill = Recorder(), Recorder()
    assert sp.signal_verified(ME, my_start(), signal.SIGTERM, opener=gone, sender=sender, kill=kill) is False
    assert sender.calls == [] and kill.calls == []


def test_a_process_that_exits_after_the_check_is_no_error_and_not_signalled_by_number():
    sender, kill = Recorder(fail=ProcessLookupError(errno.ESRCH, "No such process")), Recorder()
    before = open_fds()
    assert sp.signal_verified(ME, my_start(), signal.SIGTERM, opener=os.pidfd_open, sender=sender, kill=kill) is False
    assert len(sender.calls) == 1 and kill.calls == [] and open_fds() == before


def test_without_a_start_time_nothing_is_signalled():
    sender, kill = Recorder(), Recorder()
    assert sp.signal_verified(ME, None, signal.SIGTERM, opener=os.pidfd_open, sender=sender, kill=kill) is False
    assert sender.calls == [] and kill.calls == []


def test_open_pidfd_says_when_pidfds_are_missing():
    with pytest.raises(sp.NoPidfd):
        sp.open_pidfd(ME, my_start(), opener=lambda pid: (_ for _ in ()).throw(OSError(errno.EPERM, "seccomp")))
    fd = sp.open_pidfd(ME, my_start(), opener=os.pidfd_open)
    os.close(fd)
    assert sp.open_pidfd(ME, my_start() + 1, opener=os.pidfd_open) is None
