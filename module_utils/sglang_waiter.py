# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's work, module side: the ModelWaiter that launches, keeps, watches and stops the server. Here,
not in the module file, so that the play's one look (sglang_info with O(keep)) asks the very same code, in check
mode, whether a run would keep the server as it is.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import time

from ansible.module_utils import sglang_probe, sglang_proc
from ansible.module_utils import sglang_progress
from ansible.module_utils.sglang_inputs import Inputs, Prober, WaitError
from ansible.module_utils.sglang_launch import Cgroups, Popener, Supervision, Supervisors
from ansible.module_utils.sglang_lock import RunLock
from ansible.module_utils import sglang_plan as plan
from ansible.module_utils.sglang_status_client import StatusWait, Verdicts
from ansible.module_utils.sglang_stop import GpuRelease, Stopper
from ansible.module_utils.sglang_unit_check import UnitGuard
from ansible.module_utils.sglang_unit import CallerWatch, Systemctl, systemd_here
from ansible.module_utils import sglang_watched
from ansible.module_utils.sglang_watch import ProcView, http_status


def _sleep(seconds):
    """time.sleep looked up when called (not bound at import): the unit-test guard that forbids sleeping sees it."""
    time.sleep(seconds)


# ------------------------------------------------------------------------------ the work
class ModelWaiter(object):
    """Launch / attach / wait / stop. Clock, sleep, process launch, HTTP, /proc, cgroups and the lock are injectable."""

    def __init__(self, module, clock=time.monotonic, sleep=None, popener=None, http=http_status,
                 procs=None, wall=time.time, cgroups=None, locker=fcntl.flock, prober=None, background_health=True,
                 systemctl=None, booted=systemd_here, caller_gone=None, unit_dirs=None, events=True, supervisors=None,
                 gpu_smi=None, fetch=None):
        self.module = module
        # /v1/loads for the probe gate's idle check (no generation): an injected HTTP comes with its own fetch, or none
        self.fetch = fetch if fetch is not None or http is not http_status else sglang_probe.http_get
        self.events = events  # False: the wait polls every poll_interval (no Waker; the benches' baseline)
        self.supervisors = supervisors or Supervisors()
        self.unit_dirs = unit_dirs  # where systemd reads units (default: unit_dir + UNIT_DIRS), see check_unit
        self.unit_before = None  # our unit file's text before this run (None: there was none), set by check_unit
        self.caller_gone = caller_gone or CallerWatch()
        self.systemctl = systemctl or Systemctl(module)
        self.booted = booted  # () -> (systemd runs this host?, why not)
        self.launcher = None  # "systemd" | "detached", set by validate()
        # The action plugin's step protocol (_step_time, _resume_attempt) under the names the run reads.
        self.p = dict(module.params, step_time=module.params.get("_step_time") or 0.0,
                      resume_attempt=module.params.get("_resume_attempt"))
        self.background_health = background_health  # False: health requests run inline (unit tests' fake clock)
        self.clock = clock
        self.sleep = sleep or _sleep
        self.real_sleep = sleep is None  # the real clock: a wait may end early on an event (see wait())
        self.popener = popener or Popener()
        self.raw_http = http  # every health request goes through http() (the probe gate)
        self.procs = procs or ProcView()
        self.wall = wall
        self.cgroups = cgroups or Cgroups()
        self.locker = locker
        self.user = None
        self.user_pw = pwd.getpwuid(os.geteuid())
        self.missing_files = []
        self.prober = prober or Prober()
        self.exec_program = None  # what runs in the end (argv[0] or its last #! interpreter), set by validate()
        self.key_source = None  # systemd launcher with api_key: {"path", "key"} of the --config file that holds it
        self.port = None  # the rest is set by validate()
        self.run_dir = None
        self.fresh = False
        self.result = {"changed": False}
        # the run's parts, each a module_utils file of one job
        self.inputs = Inputs(self)  # every option checked, before anything is touched
        self.runlock = RunLock(self)  # <run_dir>/<name>.lock
        self.sup = Supervision(self)  # asking the supervisor program to start (detached), or putting one back
        self.stopper = Stopper(self)  # asking it (or systemd) to stop
        self.release = GpuRelease(self, gpu_smi)  # after that stop, before the launch: the GPU memory back
        self.status = StatusWait(self)  # waiting on its status file
        self.verdicts = Verdicts(self)  # its verdict as the module's result
        self.unit = UnitGuard(self)  # launcher systemd: the unit of our name is this deployment's, or refused

    def warn(self, text):
        """A module warning, its control characters escaped: it may quote the server's log (a client's prompt)."""
        self.module.warn(sglang_progress.operator_text(text))

    def http(self, url, headers, timeout):
        """One request. To the health URL (a generation in SGLang 0.5.23): through the deployment's probe gate
        (sglang_probe.ProbeGate, shared with the supervisor: never two of our requests in the server, none while an
        unanswered one may still be resident there), waiting for it, with a client timeout that outlasts the server's
        health window (its ``SGLANG_HEALTH_CHECK_TIMEOUT`` as configured, default 20 s). None: no answer."""
        if url != self.p.get("health_url") or self.run_dir is None:
            return self.raw_http(url, headers, timeout)
        env = dict(self.p.get("environment") or {})
        env.update(self.p.get("secret_environment") or {})
        window = sglang_probe.health_window(env)
        timeout = sglang_probe.probe_timeout(timeout, window)
        gate = sglang_probe.ProbeGate(self.run_dir, self.p["name"], window, clock=self.clock,
                                      idle=sglang_probe.idle_check(self.fetch, url, headers))
        ask = sglang_probe.gated(lambda t: self.raw_http(url, headers, t), gate, self.clock)
        end = self.clock() + window + sglang_probe.MARGIN + timeout + 1.0  # an abandoned one's window, or one in flight
        while True:
            code = ask(timeout)
            if code != sglang_probe.GATED:
                return code
            now = self.clock()
            if now >= end:
                return None
            wait = gate.free_at - now if gate.free_at is not None else 0.5
            self.sleep(max(0.05, min(wait, end - now)))

    def serving_state(self, state):
        """A kept server its supervisor finds busy or stuck (its status's ``serving.activity``): said in the result
        (``serving_state``) and a warning, so that the next run tells what the supervisor saw. Nothing is stopped
        for it here: a stuck server is restarted only by its supervisor (serve_stuck_action: restart)."""
        try:
            st = self.status.read_status() or {}
        except WaitError:
            return
        if st.get("attempt") != state.get("attempt") or st.get("verdict") != "ready":
            return
        serving = st.get("serving") if isinstance(st.get("serving"), dict) else {}
        act = serving.get("activity") if isinstance(serving.get("activity"), dict) else {}
        if act.get("state") in ("busy", "stuck"):
            self.result["serving_state"] = act["state"]
            self.warn("the serving server (PID %s) is %s by its supervisor's word: %s" % (
                state.get("pid"), act["state"], st.get("status") or act["state"]))

    def headers(self):
        h = {}
        if self.p["api_key"]:
            h["Authorization"] = "Bearer %s" % self.p["api_key"]
        return h

    def run(self):
        self.inputs.validate()
        if self.fresh and self.p["state"] == "stopped":
            self.result["msg"] = "nothing to stop: %s does not exist" % self.run_dir
            return self.result
        if self.module.check_mode and self.p["state"] == "started" and (self.fresh or self.missing_files):
            self.result.update(changed=True, restart_reason="not running", msg="would start the server (%s)" % (
                "fresh host: %s does not exist yet" % self.p["log_dir"] if self.fresh
                else "fingerprint files not written yet: %s" % ", ".join(self.missing_files)))
            return self.result
        if self.fresh:
            raise WaitError("no server of ours is recorded in %s (name %s): nothing to watch" % (self.run_dir, self.p["name"]))
        self.runlock.lock()
        try:
            if self.p["state"] == "stopped":
                return self.stopper.stop_only()
            if self.p["state"] == "watched":
                return self.watch()
            return self.start()
        finally:
            self.runlock.unlock()

    def watch(self):
        """``state: watched``: the supervisor's word on the recorded server for ``watch_time`` s (sglang_watched)."""
        return sglang_watched.watch_recorded(self)

    def _existing(self):
        """(state, ours?) of the recorded server; applies on_foreign_pid for a reused PID."""
        state, ours, stale = plan.existing(self.run_dir, self.p["name"], self.p["on_foreign_pid"])
        if stale:
            self.result["stale_state"] = stale
        return state, ours

    def start(self):
        p = self.p
        parts, fp = plan.fingerprint(p, self.launcher)
        self.result["fingerprint"] = fp
        state, ours = self._existing()
        resuming = plan.resuming(p, state, ours)
        action, reason = plan.start_plan(p, state, ours, fp, parts)
        if action == plan.KEEP:
            kept = self.keep(state, resuming)
            if kept is not None:
                return kept
            reason = plan.GONE  # nothing watches it and it does not answer: restarted under a supervisor
        if p["resume_attempt"] is not None and not resuming:
            ended = plan.ended_between_steps(p, self.status.read_status())
            if ended is not None:  # a later step of a launch that ended meanwhile: its verdict is the answer
                self.result["restart_reason"] = None
                if ended["verdict"] == "stopped":
                    return self.verdicts.service_stopped(ended, {})
                return self.verdicts.service_failed(ended, {})
        self.result["restart_reason"] = reason
        plan.refuse_foreign_port(self.port, state, ours)  # before anything is touched
        self.result["changed"] = True
        if self.module.check_mode:
            if p["prove_launch"]:
                self.inputs.prove_it_runs()
            self.result["msg"] = "would %s the server (%s)" % ("restart" if ours else "start", reason)
            return self.result
        self.inputs.prove_it_runs()
        if state is not None or self.stopper.unit_active():
            release = self.release.check()  # nvidia-smi lists the selected GPUs, before anything is stopped
            self.stopper._stop(state or {"pid": None, "unverified": True})
            if release:
                self.release.wait()
        if self.launcher == "systemd":
            return self.sup.launch_unit(parts, fp)
        return self.sup.launch(parts, fp)

    def keep(self, state, resuming):
        """Our server with the same fingerprint: a warning when the installed supervisor program is not this
        eagle-deploy's (the role's copy brings it up to date, no restart), then ready
        when it answers, else its supervisor's word (a later step's verdict, or an attach). A detached one whose
        supervisor is gone is given one back (``--adopt``) when it answers; None when it does not: the module
        watches no server itself, so it is restarted."""
        p = self.p
        problem = (self.launcher == "systemd" or state.get("watcher")) and self.sup.program_problem()
        if problem:  # the role's copy brings it up to date (no restart: its next start uses it); the module writes none
            self.warn(problem)
        systemd = state.get("launcher") == "systemd"
        alone = not systemd and not self.sup.supervisor_alive(state)
        # A later step of the launch this task started, its supervisor there: the supervisor's word comes first, and
        # its verdict ends the step at once. A request of ours before it would hold the step as long as the server
        # holds it (one whose scheduler died holds /health_generate until SGLang ends its tree).
        heeds_supervisor = resuming and not alone and not self.module.check_mode
        code = None if heeds_supervisor else self.http(p["health_url"], self.headers(), p["health_timeout"])
        self.result.update(pid=state["pid"], log_path=state.get("log_path"), attempt=state.get("attempt"),
                           restart_reason=None, tree_tracking=state.get("tree_tracking", "session"))
        self.serving_state(state)
        if sglang_proc.log_writer_of(state) is not None:
            # a run state of an eagle-deploy older than the supervisor: its server's output goes through a log writer
            # process, recorded as `log_writer` (stop_tree ends it last), kept and reported, and stopped cleanly.
            self.result["log_writer_pid"] = state["log_writer"]["pid"]
        if alone and code != 200:
            self.result["supervisor"] = "gone"
            return None
        supervisor = None if systemd else (lambda: None if self.sup.supervisor_alive(state) else -1)
        if alone:
            self.sup.supervisor_gone(state, healthy=True)
        elif resuming and not self.module.check_mode:
            # A later step of the launch this task started: its supervisor's verdict (and the load's times) is the
            # answer, also when our own probe was answered first; its ready still needs an answer of this run's own.
            return self.answered(state, code, self.status.wait_service(
                None, attached=False, attempt=state.get("attempt"), supervisor=supervisor), probed=not heeds_supervisor)
        if code == 200:
            return self.ready_now(state, resuming)
        if self.module.check_mode:
            self.result["msg"] = "server with the same fingerprint is running but not healthy yet; would wait for it"
            return self.result
        # its supervisor decides: wait on its status file
        return self.answered(state, code, self.status.wait_service(
            None, attached=not resuming, attempt=state.get("attempt"), supervisor=supervisor))

    def answered(self, state, code, result, probed=True):
        """The supervisor's ``ready`` taken only with an answer of this run's own: a health request this run sent
        (after it began) answered 200. A standing ``ready`` is the supervisor's word from before; a server that
        stopped answering since (its process stopped or hung) is never reported healthy. One request at a time,
        through http() (the probe gate: each given more than the server's own health window), at most
        ``unhealthy_after`` in all with the first one of keep(). None answered: the task fails, saying so; nothing
        is stopped (a busy server answers health late, and is not a dead one)."""
        if code == 200 or result.get("failed") or result.get("pending") or result.get("phase") != "ready":
            return result
        # keep()'s own first probe counts; a later step of this run's launch sent none (``probed`` False)
        polls, last, t0 = (1 if probed else 0), code, self.clock()
        while polls < max(2 if probed else 1, self.p["unhealthy_after"]):
            last = self.http(self.p["health_url"], self.headers(), self.p["health_timeout"])
            polls += 1
            if last == 200:
                result["health_polls"] = {"polls": polls, "failed_in_a_row": 0, "last": 200}
                return result
            if self.clock() - t0 < 1.0:
                self.sleep(1.0)  # refused at once: at least 1 s between two requests
        result["health_polls"] = {"polls": polls, "failed_in_a_row": polls, "last": last}
        result.pop("msg", None)  # the supervisor's words ("became healthy"): not this run's finding
        raise WaitError(sglang_progress.not_answering_words(
            state.get("pid"), polls, round(self.clock() - t0), last,
            self.verdicts.supervisor_words()))

    def ready_now(self, state, resuming):
        """Our kept server answered: ready, with its log's tail and end (the smoke watch's mark)."""
        tail, offset = self.verdicts.tail_of(state)
        self.result.update(elapsed=0.0, phases=[], phase="ready", log_tail=tail, log_offset=offset)
        st = {"verdict": "ready", "phase": "ready", "attempt": state.get("attempt"), "started_at": state.get("started_at")}
        if resuming and state.get("launcher") != "systemd":
            # the launch a previous step waited for answered between two steps: its load is done
            try:
                prior = self.status.read_status() or {}
            except WaitError:
                prior = {}
            if prior.get("attempt") == state.get("attempt"):
                st.update(phases=prior.get("phases") or [], shards=prior.get("shards"))
                self.status.record_load(state, st)
        self.result["progress"] = self.status.progress_of(st, state.get("launcher") or "detached")
        return self.result
