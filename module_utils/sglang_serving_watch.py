# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``wait_for_model state=watched``: a watch of our serving server through its supervisor.

The module watches no server itself: the supervisor (``sglang_supervisor.py``) follows the log, the processes and
health, decides, and keeps what a watch needs in its status file (``status["serving"]``, see
``sglang_supervisor.ServingView``: the crash lines it set aside with their byte offsets, the crash line that stands,
health, how far it has read the log). A watch waits ``watch_time`` s on that file and reports:

* the supervisor's failure verdict of the recorded attempt (written before or during the window): failed, with its
  report (class, evidence, deciding line, traceback, log tail, hint);
* else, once the window is over, the supervisor has read the log up to where it ended then, no crash line stands
  there, and this watch's own health request answered 200: ok, with ``log_offset`` (the end of the log at a line
  start, the mark for a later watch) and ``log_crash`` (a warning) for a crash line the supervisor set aside at or
  after the watch's start offset.

This watch asks the health URL itself (``WindowHealth``): an HTTP request, not a look at the log or the processes.
The supervisor asks a serving server every ``serve_health_interval`` s (10 s: each ``/health_generate`` is a
generation), so a window of a few seconds would often end without one request after the smoke requests, and a
server that fails without a crash line (a hung decode) would pass. Its requests come every ``health_interval`` s
(a failed one at least 1 s after the last, each given ``health_timeout``); ``unhealthy_after`` failures in a row
fail the watch (evidence no client can write). A crash line the log shows is the supervisor's to prove or clear
(it asks at once, and at the start's pace while the line stands): the watch waits for its word.
"""

from __future__ import annotations

import os

from ansible.module_utils import sglang_contract, sglang_probe, sglang_progress
from ansible.module_utils import sglang_settings
from ansible.module_utils.sglang_host_port import ask_health
from ansible.module_utils.sglang_input_checks import WaitError, open_log
from ansible.module_utils import sglang_status_file
from ansible.module_utils.sglang_log import tail_lines
from ansible.module_utils.sglang_unit_facts import unit_name
from ansible.module_utils.sglang_verdict import EVENT_WAIT, BackgroundAsk, InlineAsk, Waker, start_of_line

ALIVE_EVERY = 1.0  # s between two looks at the supervisor (systemctl show, or its process)
SLACK = 10.0  # s past the health budget that the supervisor may take to write what it has read


def line_start_before(fd, size):
    """The start of the last line that begins before ``size`` (``size`` itself after a line break): the end of the
    log at a line start. A line still being written counts as after it."""
    end = size
    while end > 0:
        lo = max(0, end - 65536)
        chunk = os.pread(fd, end - lo, lo)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return lo + i + 1
        end = lo
    return 0


def supervisor_words(state, unit):
    if unit is not None:
        return "unit %s" % unit
    return "its supervisor program (PID %s)" % (state.get("watcher") or {}).get("pid", "?")


def failure_fields(st, state, unit):
    """A failure verdict the supervisor wrote: its report, as the result."""
    rep = dict(st.get("report") or {})
    rep.pop("failed", None)
    rep.update(failed=True, log_path=st.get("log_path") or state.get("log_path"), attempt=st.get("attempt"),
               pid=st.get("server_pid") or state.get("pid"))
    if st.get("verdict") == "stopped":
        rep.update(crash_class="stopped", evidence="%s stopped the server (it wrote 'stopped')"
                   % supervisor_words(state, unit), hint="something stopped it (a stop, a shutdown): run the "
                   "playbook with state: started to start it again")
        rep["msg"] = "the server was stopped, not crashed — %s" % rep["hint"]
        return rep
    rep["stopped_after_failure"] = {"how": "the supervisor ends the failed tree"}
    rep["msg"] = "%s (decided by %s%s)" % (rep.get("msg") or "the server failed: %s" % st.get("verdict"),
                                           supervisor_words(state, unit), "; journalctl -u %s" % unit if unit else "")
    return rep


def gone_fields(state, unit, during):
    """No supervisor watches the recorded server (and it wrote no failure verdict)."""
    what = ("unit %s is not active" % unit if unit is not None else
            "its supervisor program is gone" if state.get("watcher") else
            "it was started without a supervisor program (an older eagle-deploy)")
    return {"failed": True, "supervisor": "gone", "pid": state.get("pid"), "log_path": state.get("log_path"),
            "attempt": state.get("attempt"),
            "msg": "nothing watches the server (PID %s, attempt %s)%s: %s. Run the playbook with state: started to put "
                   "a supervisor back (a serving server keeps running; one that does not answer is restarted)"
                   % (state.get("pid"), state.get("attempt"), " any more" if during else "", what)}


class WindowHealth(object):
    """This watch's own health requests: at once, then every ``interval`` s while they answer 200, a failed one at
    least 1 s after the last; one at a time, each given ``timeout`` (``runner``: a BackgroundAsk, or an InlineAsk on
    a unit test's fake clock). ``healthy()``: the last one answered 200; ``unhealthy()``: ``unhealthy_after`` failed
    in a row."""

    def __init__(self, runner, clock, interval, timeout, unhealthy_after, window=None):
        self.runner, self.clock = runner, clock
        self.interval, self.timeout, self.unhealthy_after = interval, timeout, unhealthy_after
        self.window = window  # the server's health window: a failure that took this long may be resident (held)
        self.held = False
        self.next_at = clock()
        self.sent = None
        self.polls = self.fails = 0
        self.last = None

    def poll(self, now):
        self._take()
        if self.sent is None and now >= self.next_at:
            self.sent = now
            self.runner.start(self.timeout)
            self._take()

    def _take(self):
        if self.sent is None or not self.runner.done():
            return
        code = self.runner.take()
        took = self.clock() - self.sent
        self.sent = None
        self.polls += 1
        self.last = code
        self.fails = 0 if code == 200 else self.fails + 1
        self.next_at = self.clock() + (self.interval if code == 200 else max(self.interval, 1.0))
        if code != 200 and self.window is not None and took >= self.window:
            # it waited out the server's window: the server may still hold it (SGLang keeps a probe it gave up on),
            # so this watch sends no other; the supervisor's word (busy or stuck) answers the question
            self.held = True
            self.next_at = float("inf")

    def healthy(self):
        return self.polls > 0 and self.fails == 0

    def unhealthy(self):
        return self.fails >= self.unhealthy_after

    def summary(self):
        return {"polls": self.polls, "failed_in_a_row": self.fails, "last": self.last}


class Watched(object):
    """One watch (see the module docstring). ``p``: the module's parameters; ``state``: the recorded run state;
    ``log_fd``: the attempt log, opened safely by the module (its size and tail are read for the result, never
    judged); ``read_status()``: the supervisor's status file; ``supervised()``: whether the supervisor still runs;
    ``ask(timeout)``: one health request; ``run_dir``: where the status file is written (inotify wakes the wait when
    it is), None on a fake clock (then ``sleep(poll_interval)``); ``unit``: the systemd unit, None detached."""

    def __init__(self, p, state, log_fd, read_status, supervised, ask, clock, sleep, background, run_dir=None,
                 unit=None):
        self.p, self.state, self.fd = p, state, log_fd
        self.read_status, self.supervised, self.unit = read_status, supervised, unit
        self.clock, self.sleep = clock, sleep
        self.waker = Waker.make() if run_dir is not None else None
        if self.waker is not None and not self.waker.watch_dir(run_dir):
            self.waker.close()
            self.waker = None
        runner = BackgroundAsk(ask) if background else InlineAsk(ask)
        if self.waker is not None and background:
            runner.notify = self.waker.poke
        window = sglang_probe.health_window(dict(p.get("environment") or {}, **(p.get("secret_environment") or {})))
        # each request outlives the server's window (never given up while it may still hold it)
        self.health = WindowHealth(runner, clock, p["health_interval"], sglang_probe.probe_timeout(
            p["health_timeout"], window), p["unhealthy_after"], window=window)
        self.start = None  # byte offset of the log where this watch starts (log_watched_from)
        self.notes = []

    def run(self):
        """(result fields, warnings): ``failed: True`` on a failure."""
        try:
            return self._run(), self.notes
        finally:
            if self.waker is not None:
                self.waker.close()

    def _not_watchable(self, st):
        """The result where there is nothing to watch (a verdict, no supervisor, not serving, a status without
        ``serving``), else None."""
        if self.mine(st) and st.get("verdict") not in (None, "ready"):
            return self.fields(failure_fields(st, self.state, self.unit))
        if not self.supervised():
            return self.fields(gone_fields(self.state, self.unit, during=False))
        if not self.mine(st) or st.get("verdict") != "ready":
            return self.not_serving(st)
        if "serving" not in st:
            return self.fields({"failed": True, "msg": "%s does not record what a watch of the serving server reads "
                                "(no 'serving' in its status: a program older than this module): restart it with "
                                "state: started and force_restart" % supervisor_words(self.state, self.unit)})
        return None

    def _run(self):
        p, t0 = self.p, self.clock()
        size = os.fstat(self.fd).st_size
        wanted = p["log_offset"]
        self.start = line_start_before(self.fd, size) if wanted == -1 else start_of_line(self.fd, min(wanted, size))
        st = self.read_status()
        before = self._not_watchable(st)
        if before is not None:
            return before
        numbers = st.get("serving") or {}
        budget = max(p["unhealthy_after"], numbers.get("unhealthy_after") or 0) * (
            max(p["health_timeout"], numbers.get("health_timeout") or 0) + 1.0)
        end = t0 + p["watch_time"]
        bound = end + budget + SLACK
        alive_at = t0 + ALIVE_EVERY
        size_end = None
        while True:
            now = self.clock()
            self.health.poll(now)
            st = self.read_status()
            if not self.mine(st):
                return self.not_serving(st, during=True)
            if st.get("verdict") not in (None, "ready"):
                return self.fields(failure_fields(st, self.state, self.unit))
            if now >= alive_at:
                alive_at = now + ALIVE_EVERY
                if not self.supervised():
                    st = self.read_status()  # it may have written its verdict and ended since the last read
                    if self.mine(st) and st.get("verdict") not in (None, "ready"):
                        return self.fields(failure_fields(st, self.state, self.unit))
                    return self.fields(gone_fields(self.state, self.unit, during=True))
            serving = st.get("serving") or {}
            busy = (serving.get("activity") or {}).get("state")
            if busy == "stuck":
                return self.stuck(serving, now - t0)
            if now >= end and self.health.held and busy == "busy" and serving.get("crash_pending") is None:
                return self.busy(serving, now - t0)
            if now >= end or self.health.unhealthy():
                if size_end is None:
                    size_end = os.fstat(self.fd).st_size  # what the supervisor must have read before a word on it
                pending = serving.get("crash_pending")
                read = serving.get("log_read", -1)
                caught_up = read is None or read >= size_end
                if (self.health.unhealthy() or self.health.held and pending is not None) and caught_up:
                    # failed in a row, or our own request sent after a crash line waited out the server's window (no
                    # client writes its fate): the crash line that stands names it
                    return self.unhealthy(serving, now - t0)
                if now >= end and caught_up and pending is None and self.health.healthy():
                    return self.ok(serving, now - t0)
                if now >= bound:
                    if self.health.unhealthy():
                        return self.unhealthy(serving, now - t0)
                    return self.undecided(pending, read, size_end, now - t0)
            self.pause(now, [end, bound, alive_at] + ([self.health.next_at] if self.health.sent is None else []))

    def pause(self, now, times):
        if self.waker is None:
            self.sleep(self.p["poll_interval"])
            return
        due = [t for t in times if t > now]
        self.waker.wait(max(0.0, min([EVENT_WAIT] + [t - self.clock() for t in due])))

    def mine(self, st):
        return sglang_contract.status_of(st, attempt=self.state.get("attempt")) is not None

    def fields(self, r, elapsed=None):
        """Every result carries the log's end (at a line start: the mark for a later watch), where this watch started
        reading, its own health requests, and the server."""
        size = os.fstat(self.fd).st_size
        r.setdefault("pid", self.state.get("pid"))
        r.setdefault("log_path", self.state.get("log_path"))
        r.setdefault("attempt", self.state.get("attempt"))
        r.setdefault("fingerprint", self.state.get("fingerprint"))
        r.setdefault("port", self.state.get("port"))
        r.update(log_offset=line_start_before(self.fd, size), log_watched_from=self.start,
                 health_polls=self.health.summary())
        if "log_tail" not in r:
            r["log_tail"] = tail_lines(os.pread(self.fd, 65536, max(0, size - 65536)), self.p["log_tail_lines"])
        if elapsed is not None:
            r["elapsed"] = round(elapsed, 3)
        return r

    def ok(self, serving, elapsed):
        r = {"msg": "watched %.1f s: no crash, healthy" % elapsed}
        aside = [e for e in serving.get("set_aside") or [] if isinstance(e, dict)
                 and isinstance(e.get("offset"), int) and e["offset"] >= self.start]
        if aside:
            first = aside[0]
            r["log_crash"] = dict((k, first.get(k)) for k in ("class", "hint", "line", "lineno", "exception", "why"))
            if first.get("class_uncertain"):
                r["log_crash"]["class_uncertain"] = True
            r["log_crash"]["acted_on"] = False
            note = sglang_progress.set_aside_words(first)
            if len(aside) > 1:
                note += " (%d more crash lines set aside since byte %d)" % (len(aside) - 1, self.start)
            r["msg"] += "; " + note
            self.notes.append(note)
        return self.fields(r, elapsed)

    def busy(self, serving, elapsed):
        """Our request waited out the server's health window, and the supervisor says busy: requests run or wait,
        the log or the token counters move. Not a failure: the server is kept serving, and the watch says so."""
        act = serving.get("activity") or {}
        note = ("the server is busy: health did not answer within its %s s window, but it is serving (%s running, %s "
                "waiting, the log and counters move): nothing was stopped" % (
                    serving.get("health_window", "?"), act.get("running", "?"), act.get("waiting", "?")))
        self.notes.append(note)
        return self.fields({"msg": "watched %.1f s: no crash, busy; %s" % (elapsed, note), "serving_state": "busy"},
                           elapsed)

    def stuck(self, serving, elapsed):
        """The supervisor says stuck (health fails, nothing moved for serve_stuck_seconds) and its action is report:
        the watch fails and says so; nothing is signalled."""
        pending = serving.get("crash_pending")
        r = {"failed": True, "crash_class": pending["class"] if pending else "stuck", "serving_state": "stuck",
             "evidence": "the supervisor's health requests fail and nothing moved (log, /v1/loads, token counters) for "
                         "%s s" % serving.get("serve_stuck_seconds", "?"),
             "hint": "the server looks stuck; it was not restarted (serve_stuck_action: %s). Read log_tail, then "
                     "restart it (state: started, force_restart: true) or set serve_stuck_action: restart"
                     % serving.get("serve_stuck_action", "report")}
        if pending:
            r.update(deciding_line=pending.get("line"), deciding_lineno=pending.get("lineno"),
                     crash_exception=pending.get("exception"))
            if pending.get("cause"):
                r["crash_cause"] = pending["cause"]
        r["msg"] = "server stuck — %s (evidence: %s; see log_tail, %s)" % (r["hint"], r["evidence"],
                                                                           self.state.get("log_path"))
        return self.fields(r, elapsed)

    def unhealthy(self, serving, elapsed):
        """This watch's health requests failed ``unhealthy_after`` in a row: evidence. The crash line that stands (if
        one does) explains it; the supervisor ends the server once its own requests fail so."""
        pending = serving.get("crash_pending")
        h = self.health
        r = {"failed": True, "crash_class": pending["class"] if pending else "unhealthy",
             "evidence": "the health URL failed %d requests in a row (last: %s), asked by this watch"
                         % (h.fails, "no answer" if h.last is None else "HTTP %s" % h.last),
             "hint": pending.get("hint") if pending else "the server is running but its health URL does not answer "
                                                         "200: read log_tail"}
        if pending:
            r.update(deciding_line=pending.get("line"), deciding_lineno=pending.get("lineno"),
                     crash_exception=pending.get("exception"))
            if pending.get("cause"):
                r["crash_cause"] = pending["cause"]
            if pending.get("class_uncertain"):
                r["class_uncertain"] = True
        r["msg"] = "server unhealthy: %s — %s (evidence: %s; see log_tail, %s). %s keeps it serving while it is " \
                   "busy; once nothing moved for %s s it is stuck (serve_stuck_action: %s)" % (
                       sglang_progress.class_words(dict(r, **{"class": r["crash_class"]})), r["hint"], r["evidence"], self.state.get("log_path"),
                       supervisor_words(self.state, self.unit).capitalize(),
                       serving.get("serve_stuck_seconds", "?"), serving.get("serve_stuck_action", "report"))
        return self.fields(r, elapsed)

    def undecided(self, pending, read, size_end, elapsed):
        if pending:
            why = "the crash line at line %s (%s) is neither proven nor cleared" % (
                pending.get("lineno"), sglang_progress.class_words(pending))
        elif read != -1:
            why = "it has read the log to byte %s of %s" % (read, size_end)
        else:
            why = "it wrote nothing about the serving server"
        return self.fields({"failed": True, "msg": "the watch cannot say: %s after %.0f s (%s). Read %s" % (
            supervisor_words(self.state, self.unit), elapsed, why, "journalctl -u %s" % self.unit if self.unit
            else "<run_dir>/%s.supervisor.log" % self.p["name"])}, elapsed)

    def not_serving(self, st, during=False):
        now = "no status" if st is None else "attempt %s, %s" % (st.get("attempt"), st.get("status") or st.get(
            "phase"))
        return self.fields({"failed": True, "msg": "our server (attempt %s) is not serving%s: its supervisor's status "
                            "says %s. Run the playbook with state: started to wait for it"
                            % (self.state.get("attempt"), " any more (a restart?)" if during else "", now)})


def watch_recorded(s, host, recorded):
    """``state: watched`` for the module (``s``: the Settings, ``host``: the Host, ``recorded``: the recorded run
    state, sglang_plan.Recorded): wait ``watch_time`` s on the supervisor's status file and report what it decided
    or set aside; the module itself follows neither the log nor the processes. Returns the report."""
    state, p = recorded.state, s.p
    if state is None or state.get("unverified") or not state.get("log_path"):
        raise WaitError("no server of ours is recorded in %s (name %s): nothing to watch"
                        % (s.run_dir, p["name"]))
    unit = unit_name(p["name"]) if state.get("launcher") == "systemd" else None

    def supervised():
        if unit is not None:
            return host.systemctl.show(unit).get("ActiveState") in ("active", "activating", "reloading")
        return host.supervisors.alive(state)
    log_fd = open_log(state["log_path"], p["log_dir"], sglang_settings.reader(s, state))
    try:
        fields, notes = Watched(
            p, state, log_fd, lambda: sglang_status_file.read_status(s), supervised,
            lambda timeout: ask_health(p, s.run_dir, host, timeout), host.clock, host.sleep,
            host.background_health, run_dir=s.run_dir if host.real_sleep and host.events else None,
            unit=unit).run()
    finally:
        os.close(log_fd)
    report = {}
    report.update(fields)
    for note in notes:
        host.say(note)
    return report
