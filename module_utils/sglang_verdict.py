# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wait: watchers over one server (its log, leader, children, health, the clock), ``decide()``, and the verdict in
words (``explain()``).

Standard library only. Used by ``library/wait_for_model.py`` on the target (``from ansible.module_utils.sglang_verdict
import ...``) and by the host watcher program (``sglang_supervisor.py``, installed with this file by the role
sglang_server, sglang_program): one code decides for both launchers.

Text never acts alone (``decide()``): what stops, fails or restarts a server is evidence no client can write (the
leader exited, a worker died, health failing in a row while watching, the clock); a crash the log shows explains and
hurries.
"""

from __future__ import annotations

import math
import os
import queue
import re
import secrets
import select
import threading
import time

from . import sglang_proc, sglang_progress
from .sglang_probe import GATED, http_get


def http_status(url, headers, timeout):
    """Status code of a GET, or None when nothing answered (refused, reset, timed out).

    Plain http.client (sglang_probe.http_get): one cheap connection per poll. (open_url builds an SSL context per
    call, ~50 ms of CPU, which made a 10-minute wait cost a tenth of a core.)"""
    answer = http_get(url, headers, timeout)
    return None if answer is None else answer[0]


def _read_bytes(path):
    """A small /proc file's bytes (one read), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)


PF_EXITING = 0x4  # /proc/<pid>/stat's flags: the process is in the kernel's exit (linux/sched.h)


class ProcView(object):
    """What the waiter needs to know about processes. Injectable for tests."""

    def children(self, pid):
        """{child_pid: start_time} of direct children, the dead excluded: zombies, and processes in the kernel's exit
        (PF_EXITING: irreversible, and a process that held a GPU context can stay there for seconds before it is a
        zombie). (Raw reads: this runs at most every look.)"""
        out = {}
        data = _read_bytes("/proc/%d/task/%d/children" % (pid, pid))
        if data is None:
            pids = [p for p, info in sglang_proc.process_table().items() if info["ppid"] == pid]
        else:
            pids = [int(x) for x in data.split()]
        for c in pids:
            data = _read_bytes("/proc/%d/stat" % c)  # state and start time from one read
            rpar = data.rfind(b")") if data else -1
            if rpar < 0:
                continue
            f = data[rpar + 2:].split()
            if len(f) > 19 and f[0] not in (b"Z", b"X") and not int(f[6]) & PF_EXITING:
                out[c] = int(f[19])
        return out

    def alive(self, pid):
        return sglang_proc.pid_alive(pid)

    def start_time(self, pid):
        return sglang_proc.proc_start_time(pid)

    def cmdline(self, pid):
        return sglang_proc.proc_cmdline(pid)


# Children that are workers from birth (their death is a crash even within child_grace): Python
# multiprocessing spawn/forkserver children, and SGLang's setproctitle names.
WORKER_RX = re.compile(r"multiprocessing\.(spawn|forkserver)|--multiprocessing-fork|^sglang::")
PYTHON_RX = re.compile(r"^(?:python|pypy)[0-9.]*$")
ACCESS_HEAD = re.compile(rb'(?:INFO|DEBUG|WARNING|ERROR)(?:\x1b\[[0-9;]*m)?: +[^ ]+ - "')  # uvicorn's access line


def start_of_line(fd, offset):
    """``offset``, moved forward to the start of the next line when it falls inside a line."""
    if offset <= 0 or os.pread(fd, 1, offset - 1) == b"\n":
        return offset
    pos = offset
    while True:
        chunk = os.pread(fd, 65536, pos)
        if not chunk:
            return pos
        nl = chunk.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(chunk)


# ------------------------------------------------------------------------------ the wait: watchers and decide()
class Candidate(object):
    """A watcher's candidate verdict, and since when it holds (``since``): for a crash, when its line was read;
    for ``ready``, when the request that answered 200 was sent. For a crash also when the log last grew
    (``quiet_since``) and whether its traceback is complete (``final``)."""

    __slots__ = ("verdict", "since", "quiet_since", "final")

    def __init__(self, verdict, since=None, quiet_since=None, final=True):
        self.verdict, self.since, self.quiet_since, self.final = verdict, since, quiet_since, final

    def __repr__(self):
        return "Candidate(%r)" % self.verdict


# During a start, with a crash line standing, our own health request unanswered this long after the line was read is
# evidence (``hung``): the dying server holds it. Asked at once when the line is read, so a crash is decided about
# this long after its line, instead of when SGLang ends its tree (0.5.17: 5 s and more, its SIGQUIT handler sleeping in
# the event loop). Short: a start that fails has its tree stopped anyway, so giving up on our own request early harms
# nothing. Never used while serving (a patient HealthWatch), where a request gets the server's whole window.
HANG_BOUND = 1.5
HELD_AFTER = 0.5  # s without an answer: a request that was taken in and held, not one refused at once
CONFIRMED_BY_THE_LOG = ("ready", "unhealthy")  # verdicts given one more look at the log before they stand
DEATHS = ("leader", "children")  # the process side: evidence no client can forge


def decide(candidates, now, watch, settle_time):
    """The verdict of one look, or None to keep waiting. Pure: the watchers' candidates and the time only.

    Text never acts alone. Evidence is what no client can write: our leader exited or a worker died (a crash,
    named by the log's class when the log has one, else ``exited``/``child_died``); waiting for a start with a
    crash line standing, our own health request unanswered ``HANG_BOUND`` s after the line (``hung``: the dying
    server holds it; ``crashed``); watching a serving server,
    health failing ``unhealthy_after`` requests in a row (``crashed`` when the log shows a crash, else
    ``unhealthy``); waiting for a start, the clock (``stalled``, ``timeout``). A crash the log shows
    (``candidates["log"]``) only explains and hurries: while it stands uncorroborated, ``ready`` needs a health
    request sent after the crash line was read (``health.since >= crash.since``) to have answered 200, and a
    watch does not end at its deadline until health has either answered so or failed ``unhealthy_after`` times
    in a row. ``settle_time`` is the drain's business (the log gets it to say why once a process died)."""
    crash = candidates.get("log")
    health, clock = candidates.get("health"), candidates.get("clock")
    for name in DEATHS:
        if candidates.get(name) is not None:
            return "crashed" if crash is not None else candidates[name].verdict
    if not watch and crash is not None and health is not None and health.verdict == "hung":
        return "crashed"  # a start whose own health request the crashed server holds (HealthWatch._hung)
    if watch and health is not None and health.verdict in ("unhealthy", "stuck"):
        return "crashed" if crash is not None else health.verdict
    if crash is not None:
        if answered_after(crash, health):
            # alive and answering after the crash line: the line acts on nothing; a watch still runs its window
            if not watch or (clock is not None and clock.verdict == "deadline"):
                return "ready"
            return None
        if not watch and clock is not None:
            return "timeout" if clock.verdict == "deadline" else clock.verdict
        return None
    if watch:
        if clock is not None and clock.verdict == "deadline" and health is not None:
            return health.verdict
        return None
    if health is not None and health.verdict == "ready":
        return "ready"
    if clock is not None:
        return "timeout" if clock.verdict == "deadline" else clock.verdict
    return None


def answered_after(crash, health):
    """Whether health answered 200 to a request sent after the log's crash line was read."""
    return (crash is not None and health is not None and health.verdict == "ready" and health.since is not None
            and health.since >= crash.since)


def outlived(candidates):
    """Whether the server answered after the log's crash line (answered_after) and nothing died."""
    return (answered_after(candidates.get("log"), candidates.get("health"))
            and not any(candidates.get(name) is not None for name in DEATHS))


class LogWatch(object):
    """Follows the log from a byte offset and feeds the classifier. Candidate: ``crashed`` (an explanation
    waiting for evidence; see decide())."""

    def __init__(self, follower, classifier, t0):
        self.follower = follower
        self.clf = classifier
        self.t0 = t0
        self.last_growth = t0
        self.woke = False  # this look saw the log reach warmup or ready, or a crash: health is asked at once
        self.own_lines = 0  # lines of the server's own: not uvicorn's access lines (ours: health, /v1/loads,
        # /metrics) nor SGLang's "Health check failed" (written because of our own requests)

    def dismiss(self):
        """The crash the classifier holds was outlived by the server: keep it aside, look for the next one."""
        self.clf.dismiss_crash()

    def poll(self, now):
        data = self.follower.read()
        self.woke = False
        if data:
            self.own_lines += sum(1 for line in data.split(b"\n") if line.strip() and not ACCESS_HEAD.search(line)
                                  and b"Health check failed" not in line)
            before = (self.clf.phase, self.clf.ready is None, self.clf.crash is None)
            self.clf.feed(data)
            self.last_growth = now
            after = (self.clf.phase, self.clf.ready is None, self.clf.crash is None)
            self.woke = after != before and (self.clf.phase in ("warmup", "ready") or before[2] != after[2])
        crash = self.clf.crash
        if crash is None:
            return None
        return Candidate("crashed", since=self.t0 + crash["at"], quiet_since=self.last_growth, final=self.clf.settled)


class LeaderWatch(object):
    """The leader process: our unreaped child (``handle``) or, attached, a PID whose start time must still be the
    recorded one (a PID reused by another process is our leader gone). Candidate: ``exited``."""

    def __init__(self, handle, pid, procs, start_time=None):
        self.handle = handle
        self.pid = pid
        self.procs = procs
        self.start_time = start_time
        self.rc = None

    def poll(self, now):
        if self.handle is not None:
            self.rc = self.handle.poll()
            exited = self.rc is not None
        else:
            exited = not self.procs.alive(self.pid)
            if not exited and self.start_time is not None:
                now_start = self.procs.start_time(self.pid)
                exited = now_start is not None and now_start != self.start_time
        return Candidate("exited") if exited else None


def is_helper(cmdline, leader_cmdline):
    """Whether a child runs a program of its own (nvidia-smi, nvcc, ninja, a shell): a helper that ends when its job
    is done, never a part of the server. A child that runs Python, or the leader's own program, may be one."""
    if not cmdline:
        return False  # not readable (gone, or exec under way): judged by the grace rule
    prog = os.path.basename(cmdline[0])
    if PYTHON_RX.match(prog):
        return False
    return not (leader_cmdline and prog == os.path.basename(leader_cmdline[0]))


class ChildrenWatch(object):
    """The leader's long-lived children. A worker (a multiprocessing spawn/forkserver child, an ``sglang::``
    title) is long-lived from birth; another child that runs Python or the leader's own program once seen alive
    for ``grace`` s; a helper running a program of its own (SGLang's leader runs nvidia-smi, JIT builds run
    compilers) never: its exit is its job done. Candidate: ``child_died``."""

    def __init__(self, pid, procs, grace):
        self.pid = pid
        self.procs = procs
        self.grace = grace
        self.seen = {}  # child pid -> (start_time, first seen, kind: "worker" | "child" | "helper")
        self.died = None  # (pid, seconds seen) of the dead worker
        self.leader_cmdline = None

    def _kind(self, c):
        cmdline = self.procs.cmdline(c) or []
        if WORKER_RX.search(" ".join(cmdline)):
            return "worker"
        if self.leader_cmdline is None:
            self.leader_cmdline = self.procs.cmdline(self.pid) or []
        return "helper" if is_helper(cmdline, self.leader_cmdline) else "child"

    def serving(self):
        """The server answered: every child alive now outlived the load and is part of the serving server, so its
        death is evidence from now on, however briefly it was seen (the grace only tells a short-lived child of a
        load from a long-lived one). Helpers (a program of their own) stay helpers."""
        for c, (st, first, kind) in list(self.seen.items()):
            if kind == "child":
                self.seen[c] = (st, first, "worker")

    def poll(self, now):
        kids = self.procs.children(self.pid)
        for c, st in kids.items():
            if c not in self.seen or self.seen[c][0] != st:
                self.seen[c] = (st, now, self._kind(c))
            elif self.seen[c][2] != "worker" and self._kind(c) == "worker":
                self.seen[c] = (self.seen[c][0], self.seen[c][1], "worker")  # exec'd into a worker since
        for c, (_st, first, kind) in list(self.seen.items()):
            if c not in kids:
                if kind == "worker" or (kind == "child" and now - first >= self.grace):
                    self.died = (c, now - first)
                    return Candidate("child_died")
                del self.seen[c]
        return None


class InlineAsk(object):
    """Runs a health request in the caller's thread (unit tests with a fake clock)."""

    def __init__(self, ask):
        self.ask = ask
        self.answer = None

    def start(self, timeout):
        self.answer = (self.ask(timeout),)

    def done(self):
        return self.answer is not None

    def take(self):
        answer, self.answer = self.answer, None
        return answer[0]


class BackgroundAsk(InlineAsk):
    """Runs health requests in one daemon worker thread (started with the first request, one request at a time), so
    that the wait loop keeps looking at the log and the processes every poll while one is under way: a request that
    the dying server never answers (the one that killed it, say) cannot hold back the report of a death."""

    def __init__(self, ask):
        super(BackgroundAsk, self).__init__(ask)
        self.requests = queue.Queue()
        self.answered = threading.Event()  # set when the request under way has its answer
        self.worker = None
        self.notify = None  # called (from the worker) once an answer is in: the Waker's poke, when the wait has one

    def _work(self):
        while True:
            timeout = self.requests.get()
            try:
                self.answer = (self.ask(timeout),)
            except Exception:  # noqa: BLE001 - a failed request is no answer, never the worker's end
                self.answer = (None,)
            self.answered.set()
            notify = self.notify  # read after the answer is set: a pause that set it first then sees done()
            if notify is not None:
                notify()

    def start(self, timeout):
        if self.worker is None:
            self.worker = threading.Thread(target=self._work, name="health", daemon=True)
            self.worker.start()
        self.answer = None
        self.answered.clear()
        self.requests.put(timeout)

    def pause(self, seconds):
        """Wait up to ``seconds``, less when the request under way gets its answer first."""
        self.answered.wait(seconds)

    def done(self):
        return self.answered.is_set()


class HealthWatch(object):
    """Asks the health URL every ``interval`` s (at once when the log says the server may be up, or shows a
    crash), one request at a time, without blocking the loop (``runner``: BackgroundAsk; InlineAsk in unit tests).
    Candidates: ``ready`` (the last request answered 200; ``since`` = when it was sent) and ``unhealthy``
    (``unhealthy_after`` failed requests in a row). Watching or attached (``patient``), a request may take
    ``timeout`` s and failed ones are at least 1 s apart; waiting for a start, a request may take 0.5-2 s, never
    much past the deadline."""

    def __init__(self, runner, clock, log, t0, deadline, interval, timeout, unhealthy_after, patient):
        self.runner = runner
        self.clock = clock
        self.log = log
        self.deadline = deadline
        self.interval = interval
        self.timeout = timeout
        self.unhealthy_after = unhealthy_after
        self.patient = patient
        self.next_at = t0
        self.last_answer = t0  # when anything last answered (for the stall check)
        self.polls = 0
        self.fails = 0
        self.last = None
        self.ok_sent = None  # when the request that last answered 200 was sent
        self.sent = None  # when the request under way was sent
        self.unanswered = None  # (sent, ended, kept_back then) of the last request that got no answer at all
        self.hang_bound = HANG_BOUND
        # Serving (Watch.serve): with a crash line standing, the next request comes after this many seconds (a failed
        # one at least 1 s after the last) instead of ``interval``, so the line is proven or cleared in seconds
        self.hurry = None
        self.serving = False  # Watch.serve: a failed request holds the next one until the server is seen idle
        self.held_since = None
        self.kept_back = 0  # requests the probe gate kept back

    def resume(self, now):
        """Serving: the server was seen idle (or the hold is over): the next request may go."""
        if self.next_at == float("inf"):
            self.next_at = now
            self.held_since = None

    def crash_since(self):
        """When the crash line that arms the hang rule was read, or None. A crash after a raw request echo may be a
        client's text (no framing tells it from SGLang's): it never arms the rule, so text and a slow answer
        alone never fail a start; the processes and the clock still decide."""
        clf = self.log.clf
        crash = clf.crash
        if crash is None or (hasattr(clf, "crash_after_raw_echo") and clf.crash_after_raw_echo() is not None):
            return None
        return self.log.t0 + crash["at"]

    def send_due(self, now):
        """Send the next request if none is under way and it is due; whether one was sent."""
        if self.sent is None and now >= self.next_at:
            self.sent = self.clock()
            timeout = self.timeout if self.patient else max(0.5, min(2.0, self.deadline - now))
            if not self.patient and self.crash_since() is not None:
                timeout = max(timeout, self.hang_bound + 0.5)  # a crash line stands: time to prove a hang
            self.runner.start(timeout)
            return True
        return False

    def poll(self, now):
        if self.log.woke:
            self.next_at = now
        crash_since = None if self.patient else self.crash_since()
        self.send_due(now)
        if self.sent is not None and self.runner.done():
            code = self.runner.take()
            if code == GATED:  # the gate kept it back (another request of ours is in the server): none was sent
                self.sent = None
                self.kept_back += 1
                self.next_at = self.clock() + 1.0
                return self._candidate()
            self.polls += 1
            self.last = code
            self.fails = 0 if code == 200 else self.fails + 1
            if code == 200:
                self.ok_sent = self.sent
            if code is None:
                # refused (at once) or timed out (after its timeout)
                self.unanswered = (self.sent, self.clock(), self.kept_back)
            self.sent = None
            gap = self.interval if code == 200 or not self.patient else max(self.interval, 1.0)
            if self.hurry is not None and self.log.clf.crash is not None:
                gap = self.hurry if code == 200 else max(self.hurry, 1.0)  # a crash line stands: hurry
            self.next_at = self.clock() + gap
            if self.serving and code != 200:
                # Serving: the server may still hold it (SGLang keeps a probe it gave up on): no next one until the
                # server is seen idle (Watch.look resumes it) - the questions that cost it nothing meanwhile.
                self.next_at = float("inf")
                self.held_since = self.clock()
            if code is not None:
                self.last_answer = self.clock()
        if crash_since is not None and self.hang_bound and self._hung(crash_since, now):
            return Candidate("hung", since=crash_since)
        return self._candidate()

    def _candidate(self):
        if self.polls and self.fails == 0:
            return Candidate("ready", since=self.ok_sent)
        if self.fails >= self.unhealthy_after:
            return Candidate("unhealthy")
        return None

    def _hung(self, crash_since, now):
        """Our own request went unanswered for ``hang_bound`` s after the crash line was read: the request in flight
        (sent before or after the line), or the last one, which timed out without an answer. No client writes our
        request's fate, and a server whose scheduler died holds it (SGLang keeps a crashed scheduler around for
        seconds before its tree ends). A request that timed out (no answer for ``HELD_AFTER`` s and more, not one
        refused at once) is held still while the probe gate keeps every later one back because of it and nothing
        answered since: as far as anything of ours knows, the server has it."""
        if self.sent is not None:
            return now - max(self.sent, crash_since) >= self.hang_bound
        if self.unanswered is not None:
            sent, ended, kept_back = self.unanswered
            if ended - sent >= HELD_AFTER and self.kept_back > kept_back and self.last_answer <= sent:
                ended = now
            return ended - max(sent, crash_since) >= self.hang_bound
        return False

    def summary(self):
        return {"polls": self.polls, "failed_in_a_row": self.fails, "last": self.last}


class ClockWatch(object):
    """The deadline, and the stall: neither log growth nor any HTTP answer for ``stall_timeout`` s (0: off).
    Candidates: ``stalled``, ``deadline``."""

    def __init__(self, deadline, stall_timeout, log, health):
        self.deadline = deadline
        self.stall_timeout = stall_timeout
        self.log = log
        self.health = health

    def poll(self, now):
        if self.stall_timeout and now - max(self.log.last_growth, self.health.last_answer) >= self.stall_timeout:
            return Candidate("stalled")
        if now >= self.deadline:
            return Candidate("deadline")
        return None


# ------------------------------------------------------------------------------ waking on events, not a poll
EVENT_WAIT = 1.0  # s: the longest pause when every event source is watched (the clock's checks still get a look)
LOG_GAP = 0.005  # s: a log that keeps growing wakes the wait at most once per this much (the processes at once)
IN_MODIFY, IN_ATTRIB, IN_DELETE_SELF, IN_MOVE_SELF = 0x2, 0x4, 0x400, 0x800
IN_CLOSE_WRITE, IN_MOVED_TO = 0x8, 0x80
LOG_EVENTS = IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF
DIR_EVENTS = IN_CLOSE_WRITE | IN_MOVED_TO  # a file of the directory written, or renamed into it (atomic writes)


def _inotify_libc():
    """libc's inotify_init1/inotify_add_watch through ctypes, or None (no ctypes, no such symbols)."""
    try:
        import ctypes
    except ImportError:
        return None
    for name in (None, "libc.so.6"):  # the running program's own symbols first (no ldconfig run to find libc)
        try:
            libc = ctypes.CDLL(name, use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            continue
        init.argtypes, init.restype = [ctypes.c_int], ctypes.c_int
        add.argtypes, add.restype = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32], ctypes.c_int
        return libc
    return None


def _drain(fd):
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, InterruptedError):
        pass
    except OSError:
        pass


class Waker(object):
    """One poll(2) over what ends a pause early: a tracked process exits (its pidfd becomes readable), the log file
    is written (inotify), a health answer comes in (``poke``, from the health thread, through a pipe).

    ``arm()`` says which processes and which file to watch and whether every one of them could be watched
    (``complete``): only then may a pause last longer than the poll interval. Where pidfds (``os.pidfd_open``,
    Linux 5.3, Python 3.9) or inotify are missing, or a descriptor cannot be had, the wait falls back to the timed
    poll. Each pidfd reports once: it is closed when it fires (the next look sees the exit), so a dead process never
    makes the wait spin. Real clock only: unit tests keep the injected sleep (or inject a waker of their own)."""

    def __init__(self, pidfd_open=None, libc=None, clock=time.monotonic):
        self.clock = clock
        self.opener = pidfd_open if pidfd_open is not None else getattr(os, "pidfd_open", None)
        self.poller = select.poll()
        self.lock = threading.Lock()
        self.poke_r, self.poke_w = os.pipe()  # non-inheritable
        os.set_blocking(self.poke_r, False)
        os.set_blocking(self.poke_w, False)
        self.poller.register(self.poke_r, select.POLLIN)
        self.libc = libc if libc is not None else _inotify_libc()
        self.ino = None
        if self.libc is not None:
            fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0:
                self.ino = fd
                self.poller.register(fd, select.POLLIN)
        self.file_ident = None  # (dev, inode) the inotify watch is on
        self.pidfds = {}  # (pid, start_time) -> pidfd
        self.by_fd = {}
        self.fired = set()  # keys whose pidfd reported (or that were gone when asked for): not watched again
        self.ready_now = None  # a reason to end the next wait at once, found while arming
        self.complete = False
        self.last_end = None  # when the last wait ended (the log's LOG_GAP counts from it)
        self.wakes = {}  # reason -> count (for tests and benches)

    @classmethod
    def make(cls):
        """A Waker, or None where this host has no poll(2) (then the wait is the timed poll)."""
        try:
            return cls()
        except (OSError, AttributeError, ValueError):
            return None

    # ---------------------------------------------------------------- what to watch
    def poke(self):
        """Wake the wait (from any thread). Safe after close()."""
        with self.lock:
            if self.poke_w is None:
                return
            try:
                os.write(self.poke_w, b"!")
            except OSError:
                pass  # full (a wake is already pending) or closed

    def arm(self, processes, log_path, log_behind=False, health_done=False):
        """Watch ``processes`` ({(pid, start_time): None}; start_time None for an unreaped child of ours) and the file
        at ``log_path``; forget processes no longer asked for. ``log_behind``: the file has bytes the last look did
        not read; ``health_done``: an answer is waiting. Either ends the next wait at once. Returns ``complete``."""
        complete = self.ino is not None and self.opener is not None
        for key in [k for k in self.pidfds if k not in processes]:
            self._forget(key)
        self.fired.intersection_update(processes)
        for key in processes:
            if key in self.pidfds or key in self.fired:
                continue
            try:
                fd = sglang_proc.open_pidfd(key[0], key[1], self.opener)
            except sglang_proc.NoPidfd:
                complete = False
                continue
            if fd is None:  # gone since the last look (or another process now): look again at once
                self.fired.add(key)
                self.ready_now = "process"
                continue
            self.pidfds[key] = fd
            self.by_fd[fd] = key
            self.poller.register(fd, select.POLLIN)
        if self.ino is not None:
            _drain(self.ino)  # what was written before this point is what log_behind tells
            complete = self._watch_file(log_path) and complete
        _drain(self.poke_r)
        if log_behind:
            self.ready_now = self.ready_now or "log"
        if health_done:
            self.ready_now = self.ready_now or "health"
        self.complete = complete
        return complete

    def watch_dir(self, path):
        """Wake on every file written or renamed into the directory ``path`` too (the supervisor's status file is
        written atomically there). Whether it could be watched."""
        if self.ino is None:
            return False
        try:
            return self.libc.inotify_add_watch(self.ino, os.fsencode(path), DIR_EVENTS) >= 0
        except (TypeError, ValueError):
            return False

    def _watch_file(self, path):
        try:
            st = os.stat(path)
        except (OSError, TypeError):
            return False  # not there yet: the timed poll until it is
        ident = (st.st_dev, st.st_ino)
        if ident != self.file_ident:
            try:
                raw = os.fsencode(path)
            except TypeError:
                return False
            if self.libc.inotify_add_watch(self.ino, raw, LOG_EVENTS) < 0:
                return False
            self.file_ident = ident
        return True

    def _forget(self, key):
        fd = self.pidfds.pop(key, None)
        if fd is not None:
            self.by_fd.pop(fd, None)
            try:
                self.poller.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)

    # ---------------------------------------------------------------- the wait
    def wait(self, seconds):
        """Wait up to ``seconds``; the reasons it ended early ({"process", "log", "health"}), or an empty set."""
        if self.ready_now is not None:
            why, self.ready_now = set([self.ready_now]), None
            return self._ended(why)
        end = self.clock() + max(0.0, seconds)
        why = set()
        left = max(0.0, seconds)
        while True:  # at least one poll: an event already in is reported, also by a wait of 0 s
            try:
                events = self.poller.poll(int(math.ceil(left * 1000)))
            except InterruptedError:
                events = []
            why = self._reasons(events)
            if why == set(["log"]) and self.last_end is not None and self.clock() - self.last_end < LOG_GAP:
                why |= self._log_gap(min(end, self.last_end + LOG_GAP))
            left = end - self.clock()
            if why or left <= 0:
                break
        return self._ended(why)

    def _log_gap(self, gap_end):
        """A log that keeps growing: wait out the gap on the processes and health only (the log's wake is kept)."""
        why = set()
        self.poller.modify(self.ino, 0)
        try:
            while not why:
                left = gap_end - self.clock()
                if left <= 0:
                    break
                try:
                    why = self._reasons(self.poller.poll(int(math.ceil(left * 1000))))
                except InterruptedError:
                    continue
        finally:
            self.poller.modify(self.ino, select.POLLIN)
        return why

    def _reasons(self, events):
        why = set()
        for fd, _ev in events:
            if fd == self.poke_r:
                _drain(fd)
                why.add("health")
            elif fd == self.ino:
                _drain(fd)
                why.add("log")
            elif fd in self.by_fd:
                key = self.by_fd[fd]
                self._forget(key)
                self.fired.add(key)
                why.add("process")
        return why

    def _ended(self, why):
        self.last_end = self.clock()
        for reason in why:
            self.wakes[reason] = self.wakes.get(reason, 0) + 1
        if not why:
            self.wakes["timer"] = self.wakes.get("timer", 0) + 1
        return why

    def close(self):
        for key in list(self.pidfds):
            self._forget(key)
        with self.lock:
            for fd in (self.poke_r, self.poke_w, self.ino):
                if fd is not None:
                    os.close(fd)
            self.poke_r = self.poke_w = self.ino = None


# ------------------------------------------------------------------------------ per-attempt logs
def next_attempt(log_dir, name):
    rx = re.compile(r"\A%s_r(\d+)\.log\Z" % re.escape(name))
    best = 0
    for entry in os.listdir(log_dir):
        m = rx.match(entry)
        if m:
            best = max(best, int(m.group(1)))
    return best + 1


def prune_attempts(log_dir, name, keep):
    if keep <= 0:
        return []
    rx = re.compile(r"\A%s_r(\d+)\.log\Z" % re.escape(name))
    found = sorted((int(m.group(1)), e) for e in os.listdir(log_dir) for m in [rx.match(e)] if m)
    removed = []
    for _attempt, entry in found[:-keep]:
        try:
            os.unlink(os.path.join(log_dir, entry))
        except OSError:
            continue  # not a file of ours to remove (a directory the service user made): left alone
        removed.append(entry)
    return removed


def point_link(link, target):
    """Point ``<name>.log`` at the latest attempt (a fresh temporary name, then an atomic rename). The link is a
    convenience: when something in the service user's log dir is in the way, it is left as it is (False)."""
    tmp = "%s.%s.tmp" % (link, secrets.token_hex(6))
    try:
        os.symlink(target, tmp)
        os.rename(tmp, link)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


# ------------------------------------------------------------------------------ the verdict in words
def evidence_text(verdict, rc, died, health, candidates, timeout, stall_timeout):
    """What proved a failure, in words: the process side, health or the clock, never a log line (decide())."""
    if candidates.get("children") is not None and died is not None:
        return "worker PID %d of the server died" % died[0]
    if candidates.get("leader") is not None:
        return "the server's leader process exited%s" % (" (rc=%s)" % rc if rc is not None else "")
    hung = candidates.get("health")
    if verdict == "crashed" and hung is not None and hung.verdict == "hung" and health is not None:
        return ("our health request got no answer for %g s after the crash line was read (the server holds it: "
                "it cannot serve)" % health.hang_bound)
    if hung is not None and hung.verdict == "stuck":
        return ("health failed while serving (our request got no 200) and nothing moved since "
                "(no line of the server's own, no change in /v1/loads or the token counters)%s" % (
                    "" if verdict == "stuck" else " for an interval after the crash line"))
    if verdict in ("unhealthy", "crashed") and health is not None:
        return "the health URL failed %d requests in a row (last: %s)" % (
            health.fails, "no answer" if health.last is None else "HTTP %s" % health.last)
    if verdict == "stalled":
        return "no log output and no HTTP answer for %d s" % stall_timeout
    return "not healthy after %d s" % timeout


def uncertain_class(clf, crash):
    """Why the class of a crash is uncertain (a sentence), or None: a raw request echo (older SGLang's
    ``--log-requests``) came at or before its deciding line, and from there on a client's prompt can write any line,
    timestamp prefix included. The class is then the latest crash the log shows before the death (the one written
    closest to the evidence), never an earlier one a prompt could have forged."""
    first = clf.crash_after_raw_echo(crash) if hasattr(clf, "crash_after_raw_echo") else None
    if first is None:
        return None
    earlier = len(getattr(clf, "superseded", ()))
    return ("The class is uncertain: a raw request echo (line %d, --log-requests of an older SGLang) came before the "
            "deciding line (line %d), and a client's prompt can write any line there, so no rule tells its lines from "
            "the server's; the class is taken from the latest crash before the death%s"
            % (first, crash["lineno"], " (%d earlier crash line%s set aside)" % (earlier, "" if earlier == 1 else "s")
               if earlier else ""))


def explain(verdict, clf, state, elapsed, rc, died, attached, watch_mode=False, health=None, candidates=None,
            timeout=0, stall_timeout=0, tail_lines=40, msg=None):
    """The result fields of a verdict (``failed: True`` on a failure) and a warning to show (or None): what the
    log says (class, hint, deciding line, traceback, tail) next to what acted (``evidence``)."""
    r = {}
    s = clf.summary()
    r.update(
        pid=state["pid"], log_path=state["log_path"], attempt=state.get("attempt"),
        elapsed=round(elapsed, 3), phase=s["phase"], shards=s["shards"],
        phases=[{"phase": ph["phase"], "elapsed": round(ph["at"], 3), "lineno": ph["lineno"]} for ph in clf.phases],
        log_tail=clf.tail(tail_lines),
    )
    crash = clf.crash
    if crash is None and verdict == "ready" and clf.dismissed:
        crash = clf.dismissed[0]  # the first crash line the server outlived
    explained = {}
    if crash is not None:
        explained = {"class": crash["class"], "hint": crash["hint"], "line": crash["line"],
                     "lineno": crash["lineno"], "exception": crash.get("exception")}
        if crash.get("cause"):
            explained["cause"] = crash["cause"]  # the crash catalogue's entry (sglang_log.CATALOGUE)
        if uncertain_class(clf, crash):
            explained["class_uncertain"] = True  # shown flagged wherever it is shown (sglang_progress.class_words)
    if verdict == "ready":
        return _explain_ready(r, crash, explained, elapsed, attached, watch_mode, msg)
    cls, hint = _class_and_hint(verdict, crash, rc, died, s["phase"], timeout, stall_timeout, r)
    if crash is not None:
        uncertain = uncertain_class(clf, crash)
        if uncertain:
            r["class_uncertain"] = True
            hint = "%s. %s" % (hint, uncertain)
    if died is not None:
        r["dead_child_pid"] = died[0]
    r["evidence"] = evidence_text(verdict, rc, died, health, candidates or {}, timeout, stall_timeout)
    if crash is not None and "deciding_line" not in r:
        explained["acted_on"] = True
        r["log_crash"] = explained  # what the log says, next to what proved the failure
    r.update(crash_class=cls, hint=hint, rc=rc)
    r["msg"] = _failure_words(verdict, r, cls, hint, s["phase"], timeout, state["log_path"])
    if crash is not None and "deciding_line" not in r:
        r["msg"] += " — the log shows %s at line %d: %s" % (
            sglang_progress.class_words(explained), crash["lineno"], crash["line"].strip()[:200])
    r["failed"] = True
    return r, None


def _explain_ready(r, crash, explained, elapsed, attached, watch_mode, msg):
    """explain() of ``ready``: its words, and a crash line the server outlived set aside (never acted on)."""
    if watch_mode:
        r["msg"] = msg = "watched %.1f s: no crash, healthy" % elapsed
    elif attached:
        r["msg"] = msg = "attached to our server (same fingerprint) and it became healthy"
    note = None
    if crash is not None:
        # The log shows a crash, but every process lives and health answered 200 to a request sent after
        # the line was read: the line is explained, never acted on.
        explained["acted_on"] = False
        explained["why"] = ("every server process stayed alive and the health URL answered 200 to a request "
                            "sent after this line was read")
        r["log_crash"] = explained
        note = sglang_progress.set_aside_words(explained)
        r["msg"] = "%s; %s" % (msg or "healthy", note)
    return r, note


def _class_and_hint(verdict, crash, rc, died, phase, timeout, stall_timeout, r):
    """The failure's class and hint: the log's crash where it decided (its deciding line and traceback into ``r``),
    else the verdict's own."""
    if verdict == "crashed" or (crash is not None and verdict in ("exited", "child_died")):
        r.update(deciding_line=crash["line"], deciding_lineno=crash["lineno"], crash_exception=crash.get("exception"),
                 traceback=crash.get("traceback"))
        if crash.get("cause"):
            r["crash_cause"] = crash["cause"]
        return crash["class"], crash["hint"]
    if verdict == "exited":
        return ("killed" if rc is not None and rc < 0 else "exited",
                "the server exited (rc=%s) before it was healthy and its log names no known cause: read log_tail" % rc)
    if verdict == "child_died":
        return "child_died", (
            "a long-lived child of the server (PID %d) died while the parent lives on: the server "
            "cannot serve and would hang (the kernel OOM killer is a common cause: dmesg -T | grep -i oom)" % died[0])
    words = {
        "unhealthy": "the server is running but its health URL does not answer 200: read log_tail",
        "stuck": ("the serving server answers no health request and nothing moved for serve_stuck_seconds: restarted "
                  "(serve_stuck_action: restart). SGLang's own --watchdog-timeout is the first line for a hung "
                  "forward pass: read log_tail"),
        "stalled": ("no log output and no HTTP answer for %d s in phase '%s': the server looks hung"
                    % (stall_timeout, phase)),
    }
    if verdict in words:
        return verdict, words[verdict]
    return "timeout", "not healthy after %d s (phase '%s'); raise timeout if the load is just slow" % (timeout, phase)


def _failure_words(verdict, r, cls, hint, phase, timeout, log_path):
    """The failure's message: its lead (class and exception), hint, evidence and log."""
    if verdict == "timeout":
        lead = "timed out after %d s in phase '%s'" % (timeout, phase)
    else:
        detail = r.get("crash_exception")
        words = {"unhealthy": "server unhealthy", "stalled": "server hung", "stuck": "server stuck"}
        lead = "%s: %s%s" % (words.get(verdict, "server crashed"),
                             sglang_progress.class_words({"class": cls, "class_uncertain": r.get("class_uncertain")}),
                             " (%s)" % detail[:200] if detail else "")
    return "%s — %s (evidence: %s; see log_tail, %s)" % (lead, hint, r["evidence"], log_path)


# ------------------------------------------------------------------------------ one server's watchers together
class Watch(object):
    """The five watchers over one server and one look at them (``look``): what ``wait_for_model`` and the host
    watcher program both run. ``settings``: health_url-less numbers (health_interval, health_timeout,
    unhealthy_after, child_grace, settle_time, stall_timeout); ``watching``: a watch of a serving server (its
    window runs to ``deadline``); ``patient``: health requests get their full timeout (a watch, an attach)."""

    def __init__(self, follower, classifier, t0, deadline, clock, handle, pid, procs, start_time, ask, background,
                 settings, watching=False, patient=False, waker=None, events=True):
        self.clock = clock
        # pause(): with the real clock a Waker (made at the first pause; injectable) ends it at the first event;
        # events=False keeps the timed poll (a baseline for the benches)
        self.waker = waker
        self.events = events
        self.last_look = t0
        self.poll_interval = settings.get("poll_interval", 0.1)
        self.woken_by = None  # why the last pause ended: a set of reasons (empty: its time was up), None: no Waker
        self.children_at = None  # when the children were last listed
        self.watching = watching
        self.settle_time = settings["settle_time"]
        self.log = LogWatch(follower, classifier, t0)
        self.leader = LeaderWatch(handle, pid, procs, start_time)
        self.children = ChildrenWatch(pid, procs, settings["child_grace"])
        self.health = HealthWatch(BackgroundAsk(ask) if background else InlineAsk(ask), clock, self.log, t0, deadline,
                                  settings["health_interval"], settings["health_timeout"], settings["unhealthy_after"],
                                  patient=patient)
        self.clockwatch = ClockWatch(deadline, 0 if watching else settings["stall_timeout"], self.log, self.health)
        self.watchers = (("log", self.log), ("leader", self.leader), ("children", self.children),
                         ("health", self.health), ("clock", self.clockwatch))
        self.candidates = {}
        self.background = background
        self.activity = None  # serving: sglang_probe.Activity (Watch.serve)
        self.stuck_action = "report"
        self.sampler = None
        self.sample_sent = None
        self.server_lines = None
        self.serve_state = None  # serving: None (health answers), "busy" or "stuck" (see question())
        self.serve_state_since = None

    def serve(self, interval, activity=None, stuck_action="report", sample_every=5.0):
        """The start is over (verdict ``ready``): from now on this is a watch of a serving server with no end. Deaths
        still decide at once; the clock no longer does (no stall, no deadline); a crash line the server outlives is set
        aside. With ``activity`` (sglang_probe.Activity: the supervisor) failed health is a question (``question()``:
        busy or stuck; only a stuck server with ``stuck_action`` restart fails), a failed request holds the next one
        until the server is seen idle, and health comes every ``interval`` s (no faster while a crash line stands).
        Without it, health failing ``unhealthy_after`` requests in a row decides, as before."""
        self.watching = True
        self.children.serving()
        self.health.hurry = None if activity is not None else self.health.interval
        self.health.serving = activity is not None
        self.activity, self.stuck_action, self.sample_every = activity, stuck_action, sample_every
        if activity is not None:
            def ask(_timeout):  # /v1/loads, /metrics: no generation
                return activity.sample(self.clock())

            self.sampler = BackgroundAsk(ask) if self.background else InlineAsk(ask)
        self.health.patient = True
        self.health.interval = interval
        self.health.deadline = float("inf")
        self.health.fails = 0
        self.health.next_at = self.clock() + interval
        self.clockwatch.stall_timeout = 0
        self.clockwatch.deadline = float("inf")

    def look(self, now):
        """Poll every watcher once; the verdict, or None to keep waiting."""
        self.last_look = now
        candidates = {}
        for name, watcher in self.watchers:
            if name == "children" and self.children_can_wait(now):
                candidates[name] = None
                continue
            candidates[name] = watcher.poll(now)
            if name == "children":
                self.children_at = now
        if self.watching and self.activity is not None:
            candidates["health"] = self.question(now, candidates.get("health"))
        if outlived(candidates) and self.watching:
            # The server answered after the crash line: the line was not its death. Set it aside (it is
            # reported as log_crash) so that a later crash is named by its own line.
            self.log.dismiss()
            candidates["log"] = None
        verdict = decide(candidates, now, self.watching, self.settle_time)
        if verdict in CONFIRMED_BY_THE_LOG:
            candidates["log"] = self.log.poll(now)  # one more look: a crash line just written wants a later 200
            verdict = decide(candidates, now, self.watching, self.settle_time)
        self.candidates = candidates
        return verdict

    def question(self, now, health):
        """Serving: failed health is a question, never a verdict. The answer costs the server nothing: the log's growth,
        ``/v1/loads`` and ``/metrics`` (Activity, sampled every ``sample_every`` s in the background while health
        fails).
        ``busy``: something moved within ``serve_stuck_seconds``; ``stuck``: nothing did. Health held after a failure
        (HealthWatch) is resumed once the server is seen idle (nothing running or waiting: it has taken our probe
        out) or, with no figures to read, once the window of the held request is long over. The health candidate:
        ``stuck`` with the action ``restart`` (a failure), else the same as before minus ``unhealthy``."""
        act, hw = self.activity, self.health
        # the server's own lines: not access lines (ours too: health, /v1/loads, /metrics) nor its words on our
        # failed health requests
        lines = self.log.own_lines
        if lines != self.server_lines:
            if self.server_lines is not None:
                act.moved(self.log.last_growth)
            self.server_lines = lines
        if hw.polls and hw.fails == 0:
            act.moved(hw.last_answer)  # the last request answered 200
        failing = hw.fails > 0
        sampler = self.sampler
        if failing and sampler is not None:
            in_flight = isinstance(sampler, BackgroundAsk) and sampler.worker is not None and not sampler.done()
            if not in_flight and (self.sample_sent is None or now - self.sample_sent >= self.sample_every):
                self.sample_sent = now
                sampler.start(act.SAMPLE_TIMEOUT)
                if not isinstance(sampler, BackgroundAsk):
                    sampler.take()
            held = hw.held_since
            if held is not None and (act.loads == (0, 0) and act.loads_at is not None and act.loads_at >= held or
                                     act.loads is None and now - held >= 3 * hw.interval):
                hw.resume(now)
        state = act.state(now, failing)
        crash_since = hw.crash_since()
        if (state == "busy" and crash_since is not None and hw.held_since is not None and hw.held_since >= crash_since
                and now - act.moved_at >= hw.interval):
            # a crash line stands, our own request sent after it waited out the server's window, and nothing moved
            # for an interval since: the crash is the server's (no client writes our request's fate), stuck now
            state = "stuck"
        if state != self.serve_state:
            self.serve_state, self.serve_state_since = state, now
        if health is not None and health.verdict == "unhealthy":
            health = None
        if state == "stuck" and self.stuck_action == "restart":
            return Candidate("stuck")
        return health

    def pause(self, seconds, sleep, real, until=None):
        """Wait before the next look. With the real clock and a Waker (event waits): until a watched process exits,
        the log is written or a health answer comes in, else at most ``EVENT_WAIT`` s, and never past the next
        time the clock's checks are due (``due()``, the caller's ``until``); ``seconds`` (the poll interval) when
        some source cannot be watched. Without a Waker: ``seconds``, less when a health answer comes in first."""
        waker = self._waker(real)
        if waker is not None:
            runner = self.health.runner
            if isinstance(runner, BackgroundAsk) and runner.notify is None:
                runner.notify = waker.poke  # set before done() is read below: no answer slips between
            complete = waker.arm(self.processes(), self.log.follower.path, self.log_behind(),
                                 self.health.sent is not None and runner.done())
            end = self.clock() + (max(seconds, EVENT_WAIT) if complete else seconds)
            while True:
                why = waker.wait(self.wait_time(max(0.0, end - self.clock()), until))
                # The time was up for the next health request: send it and wait on for its answer (one look per
                # request, not one to send it and one to read the answer); any other time up needs a look.
                if why or not complete or not self.health.send_due(self.clock()):
                    break
            self.woken_by = why if complete else None
        elif self.health.sent is not None and real and isinstance(self.health.runner, BackgroundAsk):
            self.health.runner.pause(seconds)
        else:
            sleep(seconds)

    def children_can_wait(self, now):
        """Whether this look may skip listing the children: the last pause was ended by the log or a health answer
        (no process exited: every one seen has a pidfd that would have said so) and they were listed less than a
        poll interval ago. A chatty log then costs no more /proc reads than the timed poll did."""
        why = self.woken_by
        return (why is not None and bool(why) and "process" not in why and self.children_at is not None
                and now - self.children_at < self.poll_interval)

    def _waker(self, real):
        if not (real and self.events):
            return None
        if self.waker is None:
            self.waker = Waker.make() or False
        return self.waker or None

    def processes(self):
        """{(pid, start_time): None} of what the Waker watches: the leader (None: our unreaped child) and every child
        ChildrenWatch has seen."""
        leader = self.leader
        out = {(leader.pid, None if leader.handle is not None else leader.start_time): None}
        for pid, seen in list(self.children.seen.items()):
            out[(pid, seen[0])] = None
        return out

    def log_behind(self):
        """Whether the log has bytes the last look did not read (or was cut shorter)."""
        follower = self.log.follower
        try:
            return os.stat(follower.path).st_size != follower.offset
        except (OSError, TypeError):
            return False

    def due(self):
        """The next time a clock-based check wants a look (a health request, the stall, the deadline), or None.
        Times not after the last look were looked at then (or stay past, as a watch's deadline does)."""
        health, clockwatch = self.health, self.clockwatch
        times = [clockwatch.deadline]
        if health.sent is None:
            times.append(health.next_at)
        if clockwatch.stall_timeout:
            times.append(max(self.log.last_growth, health.last_answer) + clockwatch.stall_timeout)
        crash_since = None if health.patient else health.crash_since()
        if crash_since is not None and health.sent is not None and health.hang_bound:
            times.append(max(health.sent, crash_since) + health.hang_bound)  # a held request proves a hang then
        if crash_since is not None:
            # a start with a crash line standing: a look every poll. A worker in the kernel's exit is dead
            # (ProcView.children) before its pidfd says so (a GPU context's teardown takes seconds), and a request the
            # probe gate keeps back proves no hang at a time of its own (HealthWatch._hung)
            times.append(self.last_look + self.poll_interval)
        future = [t for t in times if t > self.last_look]
        return min(future) if future else None

    def wait_time(self, longest, until=None):
        """``longest``, cut at the next due time and at ``until`` (never negative)."""
        now = self.clock()
        for t in (self.due(), until):
            if t is not None:
                longest = min(longest, max(0.0, t - now))
        return longest

    def close(self):
        """Let go of the Waker's descriptors (the health thread's late poke is then a no-op)."""
        if self.waker:
            self.waker.close()
        self.waker = False

    def drain(self, verdict, settle_time, poll_interval, sleep):
        """Read what is left of the log. When the process side spoke first, give the log the settle time to say why:
        until a crash stands with its traceback complete, or, when that crash came after a raw request echo (a
        client's prompt may have written it), the whole settle time, so that the server's own crash written just
        before the death (still on its way through the log copy) is read and explains it."""
        clf = self.log.clf
        clf.feed(self.log.follower.read())
        if verdict in ("exited", "child_died", "crashed"):
            end = self.clock() + settle_time
            while not (clf.crash is not None and clf.settled and not (
                    hasattr(clf, "crash_after_raw_echo") and clf.crash_after_raw_echo() is not None)) \
                    and self.clock() < end:
                waker = self.waker or None  # there only when pause() ran on the real clock
                if waker is not None and waker.arm({}, self.log.follower.path, self.log_behind()):
                    waker.wait(min(poll_interval, max(0.0, end - self.clock())))  # the next line, or the poll
                else:
                    sleep(poll_interval)
                clf.feed(self.log.follower.read())
            clf.finalize()
