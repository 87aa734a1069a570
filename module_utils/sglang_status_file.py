# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model reads the supervisor's status (``sglang_contract.STATUS``) and reports its verdict.

Module side only. :class:`StatusWait` waits on the status file (inotify on the run dir, the detached supervisor's
pidfd) and on the supervisor's state (the unit's, or its process's) until a verdict, the backstop timeout, or the end
of a step; :class:`Verdicts` turns a verdict into its report (the result's keys). Both take the Settings and the
Host; what follows from the status alone (:func:`read_status`, :func:`progress_of`, the loads) are functions.
"""

from __future__ import annotations

import os

from ansible.module_utils.sglang_log import tail_lines
from ansible.module_utils import sglang_contract
from ansible.module_utils import sglang_proc
from ansible.module_utils import sglang_progress
from ansible.module_utils.sglang_unit_facts import SERVICE_TIMEOUT_MARGIN, SHOW_EVERY, unit_name
from ansible.module_utils.sglang_verdict import Waker
from ansible.module_utils.sglang_input_checks import Orphaned, WaitError, open_log
from ansible.module_utils import sglang_settings, sglang_stop, sglang_unit_guard
from ansible.module_utils.sglang_reports import findings


def read_status(s):
    """The supervisor's status file (None: there is none)."""
    try:
        return sglang_proc.read_json(s.run_dir, sglang_contract.STATUS % s.p["name"])
    except sglang_proc.UntrustedState as e:
        raise WaitError(str(e))


class StatusWait(object):
    """The wait on the supervisor's word: :meth:`wait_service` returns the verdict's report."""

    def __init__(self, s, host):
        self.s = s  # the Settings
        self.host = host  # the Host: clock, sleep, wall, systemctl, caller_gone
        self.verdicts = Verdicts(s, host)
        self._status_waker = None  # the Waker of wait_service (None: not made yet; False: none to be had)

    def show(self, supervisor=None):
        """The supervisor's state as ``systemctl show`` words it: the unit's (systemd), or, detached, its process's
        (``supervisor``: () -> its exit status, None while it runs)."""
        if supervisor is None:
            return self.host.systemctl.show(unit_name(self.s.p["name"]))
        rc = supervisor()
        if rc is None:
            return {"ActiveState": "activating"}
        return {"ActiveState": "inactive" if rc == 0 else "failed", "Result": "exit-code", "ExecMainStatus": str(rc)}

    def wait_service(self, token, attached, attempt=None, supervisor=None):
        """Wait on the supervisor's status file (its verdict) and its state (the unit's, or ``supervisor``'s
        process, detached), until ready, a failure, the timeout, or the end of this step (step_time). Returns the
        verdict's report."""
        p = self.s.p
        watched_pid = None  # the supervisor this run started (its unreaped child): its exit wakes the wait (pidfd)
        if supervisor is not None and hasattr(supervisor, "poll"):
            watched_pid, supervisor = getattr(supervisor, "pid", None), supervisor.poll
        t0 = self.host.clock()
        # The watcher ends the start at `timeout` after the launch (its own clock, with the phase it reached); this
        # is the backstop when it cannot, counted from the launch too (its status's started_at), never per step.
        deadline = t0 + p["timeout"] + SERVICE_TIMEOUT_MARGIN
        from_launch = False  # the deadline counted from the status's started_at (the launch) yet
        step_end = t0 + p["step_time"] if p["step_time"] else None
        shown_at, show, st = None, {}, None
        while True:
            st = read_status(self.s)
            # this launch's status (its token), or, attached, the recorded attempt's: never an earlier attempt's verdict
            mine = sglang_contract.status_of(st, token, attempt) is not None
            verdict = st.get("verdict") if mine else None
            if mine and not from_launch and isinstance(st.get("started_at"), (int, float)):
                # once, at the first status of ours: what is left of timeout + margin since the launch, from now
                from_launch = True
                deadline = self.host.clock() + max(0.0, p["timeout"] + SERVICE_TIMEOUT_MARGIN -
                                                   max(0.0, self.host.wall() - st["started_at"]))
            if verdict == "ready":
                return self.verdicts.service_ready(st, attached)
            if verdict == "stopped":
                return self.verdicts.service_stopped(st, self.show(supervisor))
            if verdict is not None:
                return self.verdicts.service_failed(st, self.show(supervisor))
            now = self.host.clock()
            if supervisor is not None or shown_at is None or now - shown_at >= SHOW_EVERY:
                show, shown_at = self.show(supervisor), now
                active = show.get("ActiveState", "inactive")
                # inactive right after the start may be the start job still queued: final once the watcher ran
                if active == "failed" or (active == "inactive" and (mine or now - t0 >= 10)):
                    st = read_status(self.s)
                    if sglang_contract.status_of(st, token, attempt) is not None:
                        if st.get("verdict") == "stopped":
                            return self.verdicts.service_stopped(st, show)
                        if st.get("verdict") not in (None, "ready"):
                            return self.verdicts.service_failed(st, show)
                    return self.verdicts.unit_ended(show, st)
            if now >= deadline:
                return self.verdicts.service_timeout(st if mine else None, show)
            if step_end is not None and now >= step_end:
                return pending(progress_of(self.s, self.host, st if mine else None, self.s.launcher), st if mine else None)
            self.check_caller()
            self.pause_for_status(min(deadline, step_end if step_end is not None else deadline), watched_pid)

    def pause_for_status(self, until, pid=None):
        """Until the supervisor writes its status file (inotify on the run dir), the supervisor ``pid`` this run
        started ends (a pidfd), or at most SHOW_EVERY s; ``poll_interval`` where events cannot be had (and with a
        fake clock)."""
        waker = self.status_waker(pid)
        if waker is None:
            self.host.sleep(self.s.p["poll_interval"])
            return
        waker.wait(max(0.0, min(SHOW_EVERY, until - self.host.clock())))

    def status_waker(self, pid):
        """The wait's Waker, made once: the run dir watched and, when given, the supervisor's exit; None without."""
        if not (self.host.real_sleep and self.host.events):
            return None
        if self._status_waker is None:
            waker = Waker.make()
            if waker is None or not waker.watch_dir(self.s.run_dir):
                self._status_waker = False
                return None
            if pid is not None:
                waker.arm({(pid, None): None}, None)  # not armed: its exit is seen at the next look (SHOW_EVERY)
            self._status_waker = waker
        return self._status_waker or None

    def check_caller(self):
        """A dropped connection ends the wait, never the server: the server goes on loading (a unit, or its own
        session), the lock is let go at once (main() ends the process), and the next step or a re-run attaches to
        the same attempt."""
        if self.host.caller_gone():
            raise Orphaned()


class Verdicts(object):
    """A verdict of the supervisor turned into its report (the result's keys): each method returns a fresh one."""

    def __init__(self, s, host):
        self.s = s  # the Settings
        self.host = host  # the Host: systemctl, commands, warnings, the stop's tools

    def service_ready(self, st, attached):
        r = {}
        rep = st.get("report") or {}
        r.update(pid=st.get("server_pid"), log_path=st.get("log_path"), attempt=st.get("attempt"),
                 elapsed=st.get("ready_after", 0.0), phase="ready", phases=rep.get("phases", []),
                 shards=rep.get("shards"), log_tail=rep.get("log_tail", []), progress=progress_of(self.s, self.host, st, self.s.launcher))
        if rep.get("msg"):
            r["msg"] = rep["msg"]
        if attached:
            r["msg"] = sglang_progress.attached_words(self.supervisor_words())
        if rep.get("log_crash"):
            r["log_crash"] = rep["log_crash"]
            self.host.say(sglang_progress.set_aside_words(rep["log_crash"]))
        return r

    def service_failed(self, st, show):
        with findings() as r:
            rep = dict(st.get("report") or {})
            rep.pop("failed", None)
            r.update(rep)
            r.update(progress=progress_of(self.s, self.host, st, self.s.launcher))
            if self.s.launcher == "systemd":
                r["unit_state"] = self.unit_state(show)
                r["msg"] = sglang_progress.unit_failed_words(
                    rep.get("msg"), unit_name(self.s.p["name"]), show.get("ActiveState", "?"),
                    rep.get("exit_status", show.get("ExecMainStatus", "?")),
                    rep.get("exit_status") == sglang_contract.EXIT_PERMANENT)
            else:
                r["msg"] = rep.get("msg") or "the server failed"
            r["failed"] = True
            r.update(self.stop_service_after_failure(show, rep.get("exit_status", sglang_contract.EXIT_RESTARTABLE)))
            return r

    def service_stopped(self, st, show):
        """The unit was stopped (``systemctl stop``, a shutdown) before its start was decided: the watcher ended the
        server and wrote ``stopped``. Not a crash: say so, with the phase the load had reached."""
        r = {}
        unit = unit_name(self.s.p["name"])
        phase = st.get("phase") or "launching"
        evidence, hint, msg = sglang_progress.stopped_words(phase, self.supervisor_words(), (
            "systemctl stop %s" % unit if self.s.launcher == "systemd" else "a signal to the supervisor"))
        r.update(crash_class="stopped", phase=phase, attempt=st.get("attempt"), log_path=st.get("log_path"),
                 progress=progress_of(self.s, self.host, st, self.s.launcher), unit_state=self.unit_state(show),
                 evidence=evidence, hint=hint, msg=msg)
        r["failed"] = True
        return r

    def unit_state(self, show):
        return dict((k, show.get(k)) for k in ("ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus",
                                               "StatusText") if k in show)

    def supervisor_words(self):
        return sglang_progress.supervisor_words(self.s.launcher, unit_name(self.s.p["name"]))

    def supervisor_tail(self):
        """The supervisor's own last lines: the journal of the unit, or the detached supervisor's log file."""
        if self.s.launcher == "systemd":
            rc, out, _err = self.host.run_command(["journalctl", "-u", unit_name(self.s.p["name"]), "-n", "20",
                                                   "--no-pager", "-o", "cat"])
            return out.splitlines()[-20:] if rc == 0 else []
        try:
            dir_fd = sglang_proc.open_run_dir(self.s.run_dir)
        except sglang_proc.UntrustedState:
            return []
        try:
            fd = os.open(sglang_contract.SUPERVISOR_LOG % self.s.p["name"], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return []
        finally:
            os.close(dir_fd)
        try:
            size = os.fstat(fd).st_size
            return tail_lines(os.pread(fd, 65536, max(0, size - 65536)), 20)
        finally:
            os.close(fd)

    def unit_ended(self, show, st):
        """The supervisor ended before it named a verdict (it could not start or set up, or systemd's own
        TimeoutStartSec hit a load that stopped moving)."""
        r = {}
        unit = unit_name(self.s.p["name"])
        r.update(journal_tail=self.supervisor_tail(), progress=progress_of(self.s, self.host, st, self.s.launcher))
        if self.s.launcher == "systemd":
            r["unit_state"] = self.unit_state(show)
        where = ("journalctl -u %s" % unit if self.s.launcher == "systemd"
                 else os.path.join(self.s.run_dir, sglang_contract.SUPERVISOR_LOG % self.s.p["name"]))
        cls, evidence, hint, msg = sglang_progress.ended_words(self.supervisor_words(), show, where)
        r.update(crash_class=cls, evidence=evidence, hint=hint, msg=msg)
        r["failed"] = True
        return r

    def service_timeout(self, st, show):
        with findings() as r:
            phase = (st or {}).get("phase", "?")
            evidence, hint, msg = sglang_progress.timeout_words(self.s.p["timeout"], phase, self.supervisor_words())
            r.update(crash_class="timeout", evidence=evidence, hint=hint, msg=msg, unit_state=self.unit_state(show),
                     progress=progress_of(self.s, self.host, st, self.s.launcher))
            r["failed"] = True
            if self.s.launcher == "systemd":
                r.update(self.stop_service_after_failure(self.host.systemctl.show(unit_name(self.s.p["name"]))))
            elif self.s.p["stop_on_failure"] and not self.s.check:
                state = sglang_proc.read_state(self.s.run_dir, self.s.p["name"])
                if state and not state.get("untrusted"):
                    stop = sglang_stop.stop_recorded(self.s, self.host, state)
                    r["stopped_after_failure"] = stop.get("stopped")
            return r

    def stop_service_after_failure(self, show, decided=None):
        """A failed wait's server holds GPU memory and serves nothing: stop the unit (``stop_on_failure``), never
        in check mode. A unit whose watcher already ended is left failed, for systemctl status. When the watcher
        wrote the verdict (``decided``: its exit status) it ends the server's tree itself, after the verdict: the
        task does not wait for that. A start that failed for good (78) is never restarted by systemd; a
        restartable one (69) gets a stop job queued (``--no-block``) so that systemd does not start it again.
        Returns the report (``would_stop``, ``stopped_after_failure``)."""
        r = {}
        if not self.s.p["stop_on_failure"] or show.get("ActiveState") in ("inactive", "failed", None):
            return r
        if self.s.check:
            r["would_stop"] = True
            return r
        if self.s.launcher != "systemd":
            # detached: the supervisor ends the failed tree after writing the verdict, and exits; nothing restarts it
            r["stopped_after_failure"] = {"how": "the supervisor ends the failed tree"}
            return r
        unit = unit_name(self.s.p["name"])
        if decided == sglang_contract.EXIT_PERMANENT:
            r["stopped_after_failure"] = {"unit": unit, "how": "the watcher ends the failed tree"}
            return r
        if decided is not None:
            sglang_unit_guard.must(self.host.systemctl, "stop", "--no-block", unit)
            r["stopped_after_failure"] = {"unit": unit, "how": "systemctl stop --no-block"}
            return r
        stop = sglang_stop.stop_unit(self.s, self.host)
        r["stopped_after_failure"] = stop.get("stopped")
        return r

    def tail_of(self, state):
        """(log_tail, end offset) of the recorded log, read safely; ([], None) when there is none."""
        path = state.get("log_path")
        if not path or not os.path.exists(path):
            return [], None
        fd = open_log(path, self.s.p["log_dir"], sglang_settings.reader(self.s, state))
        try:
            size = os.fstat(fd).st_size
            return tail_lines(os.pread(fd, 65536, max(0, size - 65536)), self.s.p["log_tail_lines"]), size
        finally:
            os.close(fd)


def pending(progress, st=None):
    """A step (step_time) ended with the server still loading: a report that is not a failure."""
    r = {}
    r.update(pending=True, progress=progress, phase=progress["phase"], attempt=progress["attempt"],
             msg="still loading: %s" % progress["status"])
    if st:
        r.update(pid=st.get("server_pid"), log_path=st.get("log_path"))
    return r


def progress_of(s, host, st, launcher):
    """The progress fields every started result carries (see RETURN: progress)."""
    st = st or {}
    phase = st.get("phase") or "launching"
    shards = st.get("shards")
    started = st.get("started_at")
    elapsed = max(0.0, host.wall() - started) if isinstance(started, (int, float)) else None
    last = last_load(s, st.get("attempt"))
    eta = None
    if st.get("verdict") == "ready":
        eta = 0.0
    elif elapsed is not None:
        eta = sglang_progress.eta(last, st.get("phases") or [], elapsed, shards)
    verdict = st.get("verdict")
    return {"phase": phase, "verdict": verdict,
            "status": st.get("status") or sglang_progress.status_text(phase, shards, verdict, st.get("ready_after")),
            "shards": shards, "elapsed": None if elapsed is None else round(elapsed, 1),
            "eta": None if eta is None else round(eta, 1), "last_load": last.get("total") if last else None,
            "attempt": st.get("attempt"), "launcher": launcher}


def last_load(s, attempt):
    """The last successful load before this attempt (this one's own record, once it is ready, is not its ETA)."""
    try:
        loads = sglang_progress.read_loads(s.run_dir, s.p["name"])
    except (sglang_proc.UntrustedState, OSError, ValueError):
        return None
    earlier = [rec for rec in loads if attempt is None or rec.get("attempt") != attempt]
    return earlier[-1] if earlier else None


def record_load(s, host, state, st):
    """A load that became ready: its phase durations, for the next load's ETA."""
    started = state.get("started_at")
    if not isinstance(started, (int, float)) or s.check:
        return
    try:
        sglang_progress.record_load(s.run_dir, s.p["name"], sglang_progress.make_record(
            state.get("attempt"), max(0.001, host.wall() - started), st["phases"], st["shards"]))
    except (OSError, ValueError, sglang_proc.UntrustedState):
        pass  # the ETA of the next load is a convenience
