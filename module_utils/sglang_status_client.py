# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model reads the supervisor's status (``sglang_contract.STATUS``) and reports its verdict.

Module side only. :class:`StatusWait` waits on the status file (inotify on the run dir, the detached supervisor's
pidfd) and on the supervisor's state (the unit's, or its process's) until a verdict, the backstop timeout, or the end
of a step; :class:`Verdicts` turns a verdict into the module's result.
"""

from __future__ import annotations

import os

from ansible.module_utils.sglang_log import tail_lines
from ansible.module_utils import sglang_contract
from ansible.module_utils import sglang_proc
from ansible.module_utils import sglang_progress
from ansible.module_utils.sglang_unit import SERVICE_TIMEOUT_MARGIN, SHOW_EVERY, unit_name
from ansible.module_utils.sglang_watch import Waker
from ansible.module_utils.sglang_inputs import Orphaned, WaitError, open_log


class StatusWait(object):
    def __init__(self, w):
        self.w = w  # the ModelWaiter: options, result, injected clock and tools
        self._status_waker = None  # the Waker of wait_service (None: not made yet; False: none to be had)

    def read_status(self):
        try:
            return sglang_proc.read_json(self.w.run_dir, sglang_contract.STATUS % self.w.p["name"])
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))

    def show(self, supervisor=None):
        """The supervisor's state as ``systemctl show`` words it: the unit's (systemd), or, detached, its process's
        (``supervisor``: () -> its exit status, None while it runs)."""
        if supervisor is None:
            return self.w.systemctl.show(unit_name(self.w.p["name"]))
        rc = supervisor()
        if rc is None:
            return {"ActiveState": "activating"}
        return {"ActiveState": "inactive" if rc == 0 else "failed", "Result": "exit-code", "ExecMainStatus": str(rc)}

    def wait_service(self, token, attached, attempt=None, supervisor=None):
        """Wait on the supervisor's status file (its verdict) and its state (the unit's, or ``supervisor``'s
        process, detached), until ready, a failure, the timeout, or the end of this step (step_time)."""
        p = self.w.p
        watched_pid = None  # the supervisor this run started (its unreaped child): its exit wakes the wait (pidfd)
        if supervisor is not None and hasattr(supervisor, "poll"):
            watched_pid, supervisor = getattr(supervisor, "pid", None), supervisor.poll
        t0 = self.w.clock()
        # The watcher ends the start at `timeout` after the launch (its own clock, with the phase it reached); this
        # is the backstop when it cannot, counted from the launch too (its status's started_at), never per step.
        deadline = t0 + p["timeout"] + SERVICE_TIMEOUT_MARGIN
        from_launch = False  # the deadline counted from the status's started_at (the launch) yet
        step_end = t0 + p["step_time"] if p["step_time"] else None
        shown_at, show, st = None, {}, None
        while True:
            st = self.read_status()
            # this launch's status (its token), or, attached, the recorded attempt's: never an earlier attempt's verdict
            mine = sglang_contract.status_of(st, token, attempt) is not None
            verdict = st.get("verdict") if mine else None
            if mine and not from_launch and isinstance(st.get("started_at"), (int, float)):
                # once, at the first status of ours: what is left of timeout + margin since the launch, from now
                from_launch = True
                deadline = self.w.clock() + max(0.0, p["timeout"] + SERVICE_TIMEOUT_MARGIN -
                                                max(0.0, self.w.wall() - st["started_at"]))
            if verdict == "ready":
                return self.w.verdicts.service_ready(st, attached)
            if verdict == "stopped":
                return self.w.verdicts.service_stopped(st, self.show(supervisor))
            if verdict is not None:
                return self.w.verdicts.service_failed(st, self.show(supervisor))
            now = self.w.clock()
            if supervisor is not None or shown_at is None or now - shown_at >= SHOW_EVERY:
                show, shown_at = self.show(supervisor), now
                active = show.get("ActiveState", "inactive")
                # inactive right after the start may be the start job still queued: final once the watcher ran
                if active == "failed" or (active == "inactive" and (mine or now - t0 >= 10)):
                    st = self.read_status()
                    if sglang_contract.status_of(st, token, attempt) is not None:
                        if st.get("verdict") == "stopped":
                            return self.w.verdicts.service_stopped(st, show)
                        if st.get("verdict") not in (None, "ready"):
                            return self.w.verdicts.service_failed(st, show)
                    return self.w.verdicts.unit_ended(show, st)
            if now >= deadline:
                return self.w.verdicts.service_timeout(st if mine else None, show)
            if step_end is not None and now >= step_end:
                return self.pending(self.progress_of(st if mine else None, self.w.launcher), st if mine else None)
            self.check_caller()
            self.pause_for_status(min(deadline, step_end if step_end is not None else deadline), watched_pid)

    def pause_for_status(self, until, pid=None):
        """Until the supervisor writes its status file (inotify on the run dir), the supervisor ``pid`` this run
        started ends (a pidfd), or at most SHOW_EVERY s; ``poll_interval`` where events cannot be had (and with a
        fake clock)."""
        waker = self.status_waker(pid)
        if waker is None:
            self.w.sleep(self.w.p["poll_interval"])
            return
        waker.wait(max(0.0, min(SHOW_EVERY, until - self.w.clock())))

    def status_waker(self, pid):
        """The wait's Waker, made once: the run dir watched and, when given, the supervisor's exit; None without."""
        if not (self.w.real_sleep and self.w.events):
            return None
        if self._status_waker is None:
            waker = Waker.make()
            if waker is None or not waker.watch_dir(self.w.run_dir):
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
        if self.w.caller_gone():
            raise Orphaned()

    def pending(self, progress, st=None):
        """A step (step_time) ended with the server still loading: a result that is not a failure."""
        r = self.w.result
        r.update(pending=True, progress=progress, phase=progress["phase"], attempt=progress["attempt"],
                 msg="still loading: %s" % progress["status"])
        if st:
            r.update(pid=st.get("server_pid"), log_path=st.get("log_path"))
        return r

    def progress_of(self, st, launcher):
        """The progress fields every started result carries (see RETURN: progress)."""
        st = st or {}
        phase = st.get("phase") or "launching"
        shards = st.get("shards")
        started = st.get("started_at")
        elapsed = max(0.0, self.w.wall() - started) if isinstance(started, (int, float)) else None
        last = self.last_load(st.get("attempt"))
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

    def last_load(self, attempt):
        """The last successful load before this attempt (this one's own record, once it is ready, is not its ETA)."""
        try:
            loads = sglang_progress.read_loads(self.w.run_dir, self.w.p["name"])
        except (sglang_proc.UntrustedState, OSError, ValueError):
            return None
        earlier = [rec for rec in loads if attempt is None or rec.get("attempt") != attempt]
        return earlier[-1] if earlier else None

    def record_load(self, state, st):
        """A load that became ready: its phase durations, for the next load's ETA."""
        started = state.get("started_at")
        if not isinstance(started, (int, float)) or self.w.module.check_mode:
            return
        try:
            sglang_progress.record_load(self.w.run_dir, self.w.p["name"], sglang_progress.make_record(
                state.get("attempt"), max(0.001, self.w.wall() - started), st["phases"], st["shards"]))
        except (OSError, ValueError, sglang_proc.UntrustedState):
            pass  # the ETA of the next load is a convenience


class Verdicts(object):
    def __init__(self, w):
        self.w = w  # the ModelWaiter: options, result, injected clock and tools

    def service_ready(self, st, attached):
        r = self.w.result
        rep = st.get("report") or {}
        r.update(pid=st.get("server_pid"), log_path=st.get("log_path"), attempt=st.get("attempt"),
                 elapsed=st.get("ready_after", 0.0), phase="ready", phases=rep.get("phases", []),
                 shards=rep.get("shards"), log_tail=rep.get("log_tail", []), progress=self.w.status.progress_of(st, self.w.launcher))
        if rep.get("msg"):
            r["msg"] = rep["msg"]
        if attached:
            r["msg"] = sglang_progress.attached_words(self.supervisor_words())
        if rep.get("log_crash"):
            r["log_crash"] = rep["log_crash"]
            self.w.warn(sglang_progress.set_aside_words(rep["log_crash"]))
        return r

    def service_failed(self, st, show):
        r = self.w.result
        rep = dict(st.get("report") or {})
        rep.pop("failed", None)
        r.update(rep)
        r.update(progress=self.w.status.progress_of(st, self.w.launcher))
        if self.w.launcher == "systemd":
            r["unit_state"] = self.unit_state(show)
            r["msg"] = sglang_progress.unit_failed_words(
                rep.get("msg"), unit_name(self.w.p["name"]), show.get("ActiveState", "?"),
                rep.get("exit_status", show.get("ExecMainStatus", "?")),
                rep.get("exit_status") == sglang_contract.EXIT_PERMANENT)
        else:
            r["msg"] = rep.get("msg") or "the server failed"
        r["failed"] = True
        self.stop_service_after_failure(show, rep.get("exit_status", sglang_contract.EXIT_RESTARTABLE))
        return r

    def service_stopped(self, st, show):
        """The unit was stopped (``systemctl stop``, a shutdown) before its start was decided: the watcher ended the
        server and wrote ``stopped``. Not a crash: say so, with the phase the load had reached."""
        r = self.w.result
        unit = unit_name(self.w.p["name"])
        phase = st.get("phase") or "launching"
        evidence, hint, msg = sglang_progress.stopped_words(phase, self.supervisor_words(), (
            "systemctl stop %s" % unit if self.w.launcher == "systemd" else "a signal to the supervisor"))
        r.update(crash_class="stopped", phase=phase, attempt=st.get("attempt"), log_path=st.get("log_path"),
                 progress=self.w.status.progress_of(st, self.w.launcher), unit_state=self.unit_state(show),
                 evidence=evidence, hint=hint, msg=msg)
        r["failed"] = True
        return r

    def unit_state(self, show):
        return dict((k, show.get(k)) for k in ("ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus",
                                               "StatusText") if k in show)

    def supervisor_words(self):
        return sglang_progress.supervisor_words(self.w.launcher, unit_name(self.w.p["name"]))

    def supervisor_tail(self):
        """The supervisor's own last lines: the journal of the unit, or the detached supervisor's log file."""
        if self.w.launcher == "systemd":
            rc, out, _err = self.w.module.run_command(["journalctl", "-u", unit_name(self.w.p["name"]), "-n", "20",
                                                       "--no-pager", "-o", "cat"])
            return out.splitlines()[-20:] if rc == 0 else []
        try:
            dir_fd = sglang_proc.open_run_dir(self.w.run_dir)
        except sglang_proc.UntrustedState:
            return []
        try:
            fd = os.open(sglang_contract.SUPERVISOR_LOG % self.w.p["name"], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
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
        r = self.w.result
        unit = unit_name(self.w.p["name"])
        r.update(journal_tail=self.supervisor_tail(), progress=self.w.status.progress_of(st, self.w.launcher))
        if self.w.launcher == "systemd":
            r["unit_state"] = self.unit_state(show)
        where = ("journalctl -u %s" % unit if self.w.launcher == "systemd"
                 else os.path.join(self.w.run_dir, sglang_contract.SUPERVISOR_LOG % self.w.p["name"]))
        cls, evidence, hint, msg = sglang_progress.ended_words(self.supervisor_words(), show, where)
        r.update(crash_class=cls, evidence=evidence, hint=hint, msg=msg)
        r["failed"] = True
        return r

    def service_timeout(self, st, show):
        r = self.w.result
        phase = (st or {}).get("phase", "?")
        evidence, hint, msg = sglang_progress.timeout_words(self.w.p["timeout"], phase, self.supervisor_words())
        r.update(crash_class="timeout", evidence=evidence, hint=hint, msg=msg, unit_state=self.unit_state(show),
                 progress=self.w.status.progress_of(st, self.w.launcher))
        r["failed"] = True
        if self.w.launcher == "systemd":
            self.stop_service_after_failure(self.w.systemctl.show(unit_name(self.w.p["name"])))
        elif self.w.p["stop_on_failure"] and not self.w.module.check_mode:
            state = sglang_proc.read_state(self.w.run_dir, self.w.p["name"])
            if state and not state.get("untrusted"):
                self.w.stopper._stop(state)
                r["stopped_after_failure"] = r.pop("stopped", None)
        return r

    def stop_service_after_failure(self, show, decided=None):
        """A failed wait's server holds GPU memory and serves nothing: stop the unit (``stop_on_failure``), never
        in check mode. A unit whose watcher already ended is left failed, for systemctl status. When the watcher
        wrote the verdict (``decided``: its exit status) it ends the server's tree itself, after the verdict: the
        task does not wait for that. A start that failed for good (78) is never restarted by systemd; a
        restartable one (69) gets a stop job queued (``--no-block``) so that systemd does not start it again."""
        if not self.w.p["stop_on_failure"] or show.get("ActiveState") in ("inactive", "failed", None):
            return
        if self.w.module.check_mode:
            self.w.result["would_stop"] = True
            return
        if self.w.launcher != "systemd":
            # detached: the supervisor ends the failed tree after writing the verdict, and exits; nothing restarts it
            self.w.result["stopped_after_failure"] = {"how": "the supervisor ends the failed tree"}
            return
        unit = unit_name(self.w.p["name"])
        if decided == sglang_contract.EXIT_PERMANENT:
            self.w.result["stopped_after_failure"] = {"unit": unit, "how": "the watcher ends the failed tree"}
            return
        if decided is not None:
            self.w.unit.must("stop", "--no-block", unit)
            self.w.result["stopped_after_failure"] = {"unit": unit, "how": "systemctl stop --no-block"}
            return
        self.w.stopper.stop_unit()
        self.w.result["stopped_after_failure"] = self.w.result.pop("stopped", None)

    def tail_of(self, state):
        """(log_tail, end offset) of the recorded log, read safely; ([], None) when there is none."""
        path = state.get("log_path")
        if not path or not os.path.exists(path):
            return [], None
        fd = open_log(path, self.w.p["log_dir"], self.w.inputs.reader(state))
        try:
            size = os.fstat(fd).st_size
            return tail_lines(os.pread(fd, 65536, max(0, size - 65536)), self.w.p["log_tail_lines"]), size
        finally:
            os.close(fd)
